"""Recompute summary.json / summary.csv of a benchmark directory from its raw records alone.

    python -m harness.bench.summarize DIR [--slo ttft_p99_ms=800]

Exit 0: every line of every file was summarized; 1: the summary was written from the records
that could be read, and stderr says, one line per file, how many were left out and why (a torn
last line, garbage, a record of the wrong shape), or nothing usable was found and no summary
was written; 2: bad input (no requests*.jsonl, a bad --slo).

Reads every ``requests*.jsonl`` in DIR (the benchmark's own file, or one per Locust worker),
groups records by ``level_run`` (for Locust runs by level_run and user count), and applies
``harness.bench.metrics`` exactly as the benchmark does. The report can call
``summarize_dir`` instead of trusting summary.json.
"""
from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness.bench import metrics, store
from harness.results import read_json, read_records
from kit.contracts.results import BENCH_REQUESTS
from kit.cli import OneLineParser, one_line_errors


def _number(v: Any) -> bool:
    """A finite number the metrics can compute with (an int of 400 digits overflows a float)."""
    if isinstance(v, bool):
        return False
    return (isinstance(v, int) and -2**63 <= v < 2**63) or (isinstance(v, float) and math.isfinite(v))


def record_problem(r: dict) -> str | None:
    """Why a record read back from requests*.jsonl cannot be summarized (None: it can). The
    contract (kit/contracts/results.py) empties the fields it types; these are the others the
    metrics compute with, each checked for the type ``harness.bench.record`` writes."""
    c, rate = r.get("concurrency"), r.get("rate")
    if not ((_number(c) and c > 0 and rate is None) or (c is None and _number(rate) and rate > 0)):
        return "no concurrency or rate > 0"
    for k in ("t_scheduled_ns", "t_sent_ns", "t_end_ns", "wall_sent", "prompt_tokens", "output_tokens"):
        if r.get(k) is not None and not _number(r[k]):
            return f"{k} not a number"
    for k in ("chunk_us", "chunk_tokens"):
        v = r.get(k)
        if v is not None and not (isinstance(v, list) and all(_number(x) for x in v)):
            return f"{k} not a list of numbers"
    for k in ("output_tokens_source", "chunk_tokens_source", "profile"):
        if r.get(k) is not None and not isinstance(r[k], str):
            return f"{k} not a string"
    if r.get("warmup") is not None and not isinstance(r["warmup"], bool):
        return "warmup not true or false"
    if r.get("ok") and r.get("t_sent_ns") is None:
        return "completed without t_sent_ns"
    return None


def summarize_dir(out_dir: Path, slo: dict[str, float] | None = None,
                  notes: list[str] | None = None) -> list[dict]:
    """The levels of ``out_dir``'s records. Lines that are not records and records that cannot
    be summarized are left out; with ``notes``, one line per file says how many and why."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in sorted(Path(out_dir).glob("requests*.jsonl")):
        bad: Counter[str] = Counter()
        said: list[str] = []
        for r in read_records(f, BENCH_REQUESTS, notes=said):  # any version; wrong-typed fields emptied
            why = record_problem(r)
            if why:
                bad[why] += 1
                continue
            key = ("concurrency", r["concurrency"]) if r.get("concurrency") is not None \
                else ("rate", r.get("rate"))
            groups[(r.get("level_run"), key)].append(r)
        if bad:
            said.append(f"{sum(bad.values())} records left out ("
                        + ", ".join(f"{n} {why}" for why, n in bad.most_common()) + ")")
        if said and notes is not None:  # one line per file
            notes.append(f"{f}: " + "; ".join(n.removeprefix(f"{f}: ") for n in said))
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


@one_line_errors("harness.bench.summarize")
def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m harness.bench.summarize")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--slo", default=None)
    args = ap.parse_args(argv)
    if not any(args.dir.glob("requests*.jsonl")):
        print(f"harness.bench.summarize: no requests*.jsonl in {args.dir}", file=sys.stderr)
        return 2
    slo = metrics.parse_slo(args.slo)  # SLOError: one line, exit 2
    notes: list[str] = []
    levels = summarize_dir(args.dir, slo, notes)
    if not levels:
        print(f"harness.bench.summarize: no usable request record in {args.dir}"
              + (f" ({'; '.join(notes)})" if notes else "") + ": summary.json and summary.csv left as they were",
              file=sys.stderr)
        return 1
    for n in notes:
        print(f"harness.bench.summarize: {n}", file=sys.stderr)
    try:
        store.write_summary(args.dir, levels)
    except OSError as e:
        print(f"harness.bench.summarize: cannot write the summary in {args.dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    from harness.bench.cli import print_table
    print_table(levels)
    return 1 if notes else 0  # a summary of fewer records than the files hold says so in its exit


if __name__ == "__main__":
    sys.exit(main())
