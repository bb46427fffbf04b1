"""Recompute summary.json / summary.csv of a benchmark directory from its raw records alone.

    python -m harness.bench.summarize DIR [--slo ttft_p99_ms=800]

Reads every ``requests*.jsonl`` in DIR (the benchmark's own file, or one per Locust worker),
groups records by ``level_run`` (for Locust runs by level_run and user count), and applies
``harness.bench.metrics`` exactly as the benchmark does. The report can call
``summarize_dir`` instead of trusting summary.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from harness.bench import metrics, store
from harness.results import read_jsonl


def summarize_dir(out_dir: Path, slo: dict[str, float] | None = None) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in sorted(Path(out_dir).glob("requests*.jsonl")):
        for r in read_jsonl(f):
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
    try:
        prior = {lv.get("level_run"): lv.get("complete", True)
                 for lv in json.loads((Path(out_dir) / store.SUMMARY).read_text(encoding="utf-8"))
                 if isinstance(lv, dict)}
    except (OSError, ValueError, TypeError):
        prior = {}
    levels = []
    for (level_run, (kind, value)), recs in groups.items():
        if latest[(kind, value)][1] != level_run:
            continue
        lv = {kind: value, **metrics.summarize_level(recs, slo=slo), "level_run": level_run,
              "profile": recs[0].get("profile"), "complete": prior.get(level_run, True)}
        levels.append(lv)
    levels.sort(key=lambda lv: (0, lv["concurrency"]) if "concurrency" in lv else (1, lv["rate"]))
    metrics.mark_knee(levels)
    return levels


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
