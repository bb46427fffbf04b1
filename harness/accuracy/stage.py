"""The ``accuracy`` stage of harness.run (off by default: ``--accuracy`` or ``--only accuracy``).

Every live endpoint (EC2 through its tunnel, SageMaker and Bedrock through their APIs, --endpoint
servers) is asked the same items; results go to ``<run>/accuracy/`` (items.jsonl, accuracy.json,
run.json), which the report's accuracy section reads.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from harness.accuracy.cli import add_options, check_options, run_accuracy
from harness.accuracy.client import BackendDown, target_for
from kit import variants
from harness.endpoint import Endpoint

PREFIX = "accuracy-"
OUT = "accuracy"


def add_stage_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("accuracy (stage accuracy, off by default; docs/accuracy.md)")
    g.add_argument("--accuracy", action="store_true", help="run the accuracy stage too")
    add_options(g, prefix=PREFIX)


def check_stage_options(a: argparse.Namespace) -> dict[str, Any]:
    """Raises kit.errors.UsageError (one line)."""
    return check_options(a, prefix=PREFIX)


def label(ep: Endpoint) -> str:
    """Backend name, model id and scheme: a precision is a deployment (kit/variants.py),
    told apart by its model id, e.g. ``g6@bf16 · google/gemma-4-E2B-it (bf16)``."""
    return variants.label(ep.name, ep.model_id, ep.scheme)


def run_stage(endpoints: list[Endpoint], run_dir: Path, opts: dict[str, Any], *, boto_session: Any = None,
              echo: Callable[[str], None] = print) -> str:
    targets, unreachable = [], []
    for ep in endpoints:
        try:
            t = target_for(ep, opts["settings"], boto_session=boto_session)
        except BackendDown as e:
            unreachable.append(f"{ep.name}: {e}")
            continue
        t.label = label(ep)
        targets.append(t)
    for u in unreachable:
        echo(f"accuracy   {u}")
    if not targets:
        return "error: no endpoint to ask" + (f" ({'; '.join(unreachable)})" if unreachable else "")
    run = run_accuracy(targets, opts, run_dir / OUT, echo=echo)
    done = [n for n, b in run["backends"].items() if b["status"] == "complete"]
    bad = [n for n in run["backends"] if n not in done] + [u.split(":")[0] for u in unreachable]
    return f"{'incomplete' if bad else 'ok'} ({len(done)}/{len(done) + len(bad)} endpoints complete)" + (
        f": {', '.join(bad)} (reasons in accuracy/run.json)" if bad else "")


__all__ = ["add_stage_options", "check_stage_options", "run_stage"]
