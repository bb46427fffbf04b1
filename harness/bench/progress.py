"""A rich progress bar per load level: requests done, failures, live output tok/s.

Rendering runs on rich's own refresh thread at 2 Hz (it holds the GIL while it renders); the per-record callback only bumps
counters, so the bar costs the measurement next to nothing. Off when not on a terminal.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable


class BenchProgress:
    def __init__(self, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.enabled = enabled
        self.progress: Any = None

    def __enter__(self) -> "BenchProgress":
        if self.enabled:
            # imported only when shown: a bench run on an instance (--bench-from instance) runs
            # with the instance's Python, which may lack rich
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("failed {task.fields[failed]}"), TextColumn("{task.fields[tok_s]} tok/s"),
                TimeElapsedColumn(), console=Console(stderr=True), refresh_per_second=2)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def level(self, label: str, total: int | None) -> Callable[[dict], None]:
        if self.progress is None:
            return lambda rec: None
        task = self.progress.add_task(label, total=total, failed=0, tok_s="-")
        st = {"done": 0, "failed": 0, "tokens": 0, "t0": time.monotonic()}
        prog = self.progress

        def on_record(rec: dict) -> None:
            st["done"] += 1
            if rec.get("ok"):
                st["tokens"] += rec.get("output_tokens") or 0
            else:
                st["failed"] += 1
            el = time.monotonic() - st["t0"]
            prog.update(task, completed=st["done"], failed=st["failed"],
                        tok_s=f"{st['tokens'] / el:,.0f}" if el > 0 else "-")

        return on_record
