"""Recompute summary.json / summary.csv of a benchmark directory from its raw records alone.

    python -m harness.bench.summarize DIR [--slo ttft_p99_ms=800]

Reads every ``requests*.jsonl`` in DIR (the benchmark's own file, or one per Locust worker),
groups records by ``level_run`` (for Locust runs by level_run and user count), and applies
``harness.bench.metrics`` exactly as the benchmark does. The report can call
``summarize_dir`` instead of trusting summary.json.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.bench import metrics, store
from harness.results import read_json, read_records
from kit.contracts.results import BENCH_REQUESTS


def summarize_dir(out_dir: Path, slo: dict[str, float] | None = None) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in sorted(Path(out_dir).glob("requests*.jsonl")):
        for r in read_records(f, BENCH_REQUESTS):  # any version; a record's wrong-typed fields emptied
            key = ("concurrency", r["concurrency"]) if r.get("concurrency") is not None \
                else ("rate", r.get("rate"))
            groups[(r.get("level_run"), key)].append(r)
    # a level run again after an interruption (--resume) has a newer level_run: keep the latest
    # (by wall clock: the monotonic clock restarts with the machine and differs between machines)
    latest: dict[tuple, tuple] = {}
    for (level_run, key), recs in groups.items():
        t = max((r.get("wall_sent") or 0) for r in recs)
        if key not in latest or t > latest[key][0]:
            latest[key] = (t, level_run)
    # whether a level ran to its end is known only to the run that wrote summary.json (a level
    # cut by the time limit or Ctrl-C is "complete": false there); Locust levels have no such file
    prior: dict[Any, dict] = {}
    saved = store.levels_of(read_json(Path(out_dir) / store.SUMMARY))  # None when absent or unreadable
    for lv in saved if isinstance(saved, list) else []:
        if isinstance(lv, dict):
            prior[lv.get("level_run")] = lv
    levels = []
    for (level_run, (kind, value)), recs in groups.items():
        if latest[(kind, value)][1] != level_run:
            continue
        lv = {kind: value, **metrics.summarize_level(recs, slo=slo), "level_run": level_run,
              "profile": recs[0].get("profile")}
        was = prior.get(level_run, {})
        # complete only if the run said so AND every request it counted is still in the records
        # (a record lost to a torn line leaves the level short: not complete)
        lv["complete"] = was.get("complete", True) is True and _sent(lv) >= _sent(was)
        levels.append(lv)
    levels.sort(key=lambda lv: (0, lv["concurrency"]) if "concurrency" in lv else (1, lv["rate"]))
    metrics.mark_knee(levels)
    return levels


def _sent(level: dict) -> int:
    """Requests a summary counts (measured and warm-up, completed or failed); 0 when unknown."""
    warm = level.get("warmup") if isinstance(level.get("warmup"), dict) else {}
    n = 0
    for v in (level.get("completed"), level.get("failed"), warm.get("completed"), warm.get("failed")):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            n += v
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.summarize")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--slo", default=None)
    args = ap.parse_args(argv)
    if not any(args.dir.glob("requests*.jsonl")):
        print(f"harness.bench.summarize: no requests*.jsonl in {args.dir}", file=sys.stderr)
        return 2
    try:
        slo = metrics.parse_slo(args.slo)
    except metrics.SLOError as e:
        print(f"harness.bench.summarize: {e}", file=sys.stderr)
        return 2
    levels = summarize_dir(args.dir, slo)
    store.write_summary(args.dir, levels)
    from harness.bench.cli import print_table
    print_table(levels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
