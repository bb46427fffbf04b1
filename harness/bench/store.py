"""The files of one benchmark directory, and writing them without disturbing the measurement.

    DIR/requests.jsonl   one record per request, appended (fsync'd) as each request ends
    DIR/summary.json     {"schema_version": 1, "levels": [...]} (see docs/bench.md), rewritten
                         atomically per level (before versions: the bare list of levels)
    DIR/summary.csv      the same, flat, a schema_version column first
    DIR/bench.json       what was run: endpoint, profile, caps, plan, versions, times

Each file's version and shape are its contract in kit/contracts/results.py (BENCH_*).

Records are written from a background thread: an fsync on the event loop would stall every
stream in flight and show up as latency that is not the server's.
"""
from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from harness.results import append_bytes, write_file, write_text
from kit.contracts.results import BENCH_CONFIG, BENCH_REQUESTS, BENCH_SUMMARY, BENCH_SUMMARY_CSV, VERSION_KEY

try:
    import orjson

    def _line(record: dict) -> bytes:
        return orjson.dumps(record, default=str, option=orjson.OPT_APPEND_NEWLINE)
except ImportError:  # pragma: no cover
    def _line(record: dict) -> bytes:
        return (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()

REQUESTS = "requests.jsonl"
SUMMARY = "summary.json"
SUMMARY_CSV = "summary.csv"
CONFIG = "bench.json"


class RecordWriter:
    """Appends records to requests.jsonl from a background thread, in batches, one fsync each.

    The event loop serializes the record (orjson, tens of µs) and appends the bytes to a deque:
    no lock to contend for, no syscall. The thread only joins, writes and fsyncs, which release
    the GIL; serializing there would hold the GIL for milliseconds and stall every stream. A
    record reaches the disk within ~interval + one fsync of the request ending; a per-record
    fsync could not keep up with hundreds of requests/s.
    """

    def __init__(self, path: Path, interval: float = 0.05) -> None:
        self.path = path
        self.interval = interval
        self.pending: deque = deque()
        self.queued = 0
        self.written = 0
        self.error: BaseException | None = None
        self._stop = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self.thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)
        self.thread.start()

    def put(self, record: dict) -> None:
        # the version stamped, not the shape checked: this runs once per request on the event loop
        self.pending.append(_line(BENCH_REQUESTS.stamp(record, check=False)))
        self.queued += 1

    def _run(self) -> None:
        while True:
            batch = []
            while self.pending:
                batch.append(self.pending.popleft())
            if batch:
                try:  # on a line of its own, never through a symlink (harness.results)
                    append_bytes(self.path, b"".join(batch))
                except BaseException as e:  # noqa: BLE001 - disk full etc.: surfaced by flush()
                    self.error = e
                self.written += len(batch)
            elif self._stop:
                return
            else:
                time.sleep(self.interval)

    def flush(self) -> None:
        """Block until everything put so far is on disk (called between levels)."""
        while self.written < self.queued and self.thread.is_alive():
            time.sleep(0.005)
        if self.error is not None:
            raise RuntimeError(f"could not write {self.path}: {self.error}")

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=30)


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


def levels_of(saved: Any) -> Any:
    """The levels of a parsed summary.json, of any version (before versions: the bare list);
    anything else as it is, for the caller to refuse."""
    saved = BENCH_SUMMARY.legacy(saved) if BENCH_SUMMARY.legacy else saved
    return saved.get("levels") if isinstance(saved, dict) else saved


def write_config(out_dir: Path, config: dict) -> None:
    write_file(out_dir / CONFIG, BENCH_CONFIG, config)


def write_summary(out_dir: Path, levels: list[dict]) -> None:
    write_file(out_dir / SUMMARY, BENCH_SUMMARY, {"levels": levels})
    rows = [{VERSION_KEY: BENCH_SUMMARY_CSV.version, **_flat(lv)} for lv in levels]
    cols: list[str] = []
    for r in rows:
        cols.extend(c for c in r if c not in cols)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    write_text(out_dir / SUMMARY_CSV, buf.getvalue())
