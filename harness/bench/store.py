"""The files of one benchmark directory, and writing them without disturbing the measurement.

    DIR/requests.jsonl   one record per request, appended (fsync'd) as each request ends
    DIR/summary.json     list of levels (see docs/bench.md), rewritten atomically per level
    DIR/summary.csv      the same, flat
    DIR/bench.json       what was run: endpoint, profile, caps, plan, versions, times

Records are written from a background thread: an fsync on the event loop would stall every
stream in flight and show up as latency that is not the server's.
"""
from __future__ import annotations

import csv
import io
import queue
import threading
from pathlib import Path
from typing import Any

from harness.results import append_jsonl, read_jsonl, write_json

REQUESTS = "requests.jsonl"
SUMMARY = "summary.json"
SUMMARY_CSV = "summary.csv"
CONFIG = "bench.json"


class RecordWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.q: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)
        self.thread.start()

    def put(self, record: dict) -> None:
        self.q.put(record)

    def _run(self) -> None:
        while True:
            rec = self.q.get()
            try:
                if rec is None:
                    return
                append_jsonl(self.path, rec)
            except BaseException as e:  # disk full etc.: surfaced by flush()
                self.error = e
            finally:
                self.q.task_done()

    def flush(self) -> None:
        self.q.join()
        if self.error is not None:
            raise RuntimeError(f"could not write {self.path}: {self.error}")

    def close(self) -> None:
        self.q.put(None)
        self.thread.join(timeout=30)


def read_records(out_dir: Path) -> list[dict]:
    return list(read_jsonl(out_dir / REQUESTS))


def _flat(level: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"concurrency": level.get("concurrency"), "rate": level.get("rate")}
    for k, v in level.items():
        if k in ("concurrency", "rate", "slo"):
            continue
        if isinstance(v, dict) and k.endswith("_ms"):
            for sk, sv in v.items():
                row[f"{k[:-3]}_{sk}_ms" if sk != "n" else f"{k[:-3]}_n"] = sv
        elif k == "errors":
            row[k] = ";".join(f"{c}:{n}" for c, n in v.items())
        elif isinstance(v, dict):
            row[k] = ";".join(f"{c}:{n}" for c, n in v.items())
        else:
            row[k] = v
    return row


def write_summary(out_dir: Path, levels: list[dict]) -> None:
    write_json(out_dir / SUMMARY, levels)
    rows = [_flat(lv) for lv in levels]
    cols: list[str] = []
    for r in rows:
        cols.extend(c for c in r if c not in cols)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    tmp = out_dir / (SUMMARY_CSV + ".tmp")
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    tmp.replace(out_dir / SUMMARY_CSV)
