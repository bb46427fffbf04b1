"""python -m harness.cost [--offline] [--json] [--input-per-output R] [--region REGION]
python -m harness.cost run RESULTS_DIR [--offline] [--input-per-output R]
python -m harness.cost snapshot --out FILE          (re-price the snapshot live; needs credentials)
python -m harness.cost payback --before USD --after USD --engineering USD [--json]

The first form prints the plan per backend (harness.cost.breakeven); without credentials, or with
--offline, every price comes from the dated snapshot and says so. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.results import write_json
from kit.cli import OneLineParser, one_line_errors
from kit.errors import UsageError


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return v


def _region(text: str) -> str:
    from harness.cost.prices import location_for_region

    try:
        location_for_region(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


@one_line_errors("harness.cost")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from harness.cost.prices import PriceBook

    if argv[:1] == ["snapshot"]:
        return _snapshot(argv[1:])
    if argv[:1] == ["payback"]:
        return _payback(argv[1:])
    if argv[:1] == ["run"]:
        p = OneLineParser(prog="python -m harness.cost run")
        p.add_argument("results_dir", type=Path)
        p.add_argument("--offline", action="store_true")
        p.add_argument("--input-per-output", type=_ratio, default=5.0)
        a = p.parse_args(argv[1:])
        if not (a.results_dir / "meta.json").exists() and not (a.results_dir / "bench").is_dir():
            print(f"harness.cost: {a.results_dir} is not a results directory (no meta.json, no bench/)",
                  file=sys.stderr)
            return 2
        from harness.cost.run_cost import cost_for_run

        try:
            cost = cost_for_run(a.results_dir, PriceBook.auto(offline=a.offline), a.input_per_output)
        except OSError as e:  # e.g. a read-only results directory
            print(f"harness.cost: cannot write {a.results_dir / 'cost.json'}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"wrote {a.results_dir / 'cost.json'} ({len(cost['endpoints'])} endpoints)")
        return 0

    p = OneLineParser(prog="python -m harness.cost", description="Cost plan per backend.")
    p.add_argument("--offline", action="store_true", help="use the dated snapshot, never the API")
    p.add_argument("--json", action="store_true", help="print JSON: one object per backend id")
    p.add_argument("--input-per-output", type=_ratio, default=5.0,
                   help="input tokens per output token for Bedrock (default 5)")
    p.add_argument("--region", type=_region, default=None,
                   help="price this region (default: where the kit deploys each backend, kit/regions.py)")
    a = p.parse_args(argv)
    from kit import catalog
    from harness.cost.breakeven import format_plan, offline_plan
    from kit.regions import resolve

    kit = resolve(a.region)  # the one region resolution the stacks deploy with
    book = PriceBook.auto(offline=a.offline)
    plan = offline_plan(a.input_per_output, book, backend_regions={b: kit.of(b) for b in catalog.BACKEND_IDS})
    if a.json:
        print(json.dumps(plan, indent=2))
    else:
        print(format_plan(plan, a.input_per_output, book.notes))
    return 0


def _usd(text: str) -> float:
    try:
        v = float(text.replace(",", "").lstrip("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an amount in USD >= 0, got {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be an amount in USD >= 0, got {text!r}")
    return v


def _payback(argv: list[str]) -> int:
    from harness.cost.formulas import payback

    p = OneLineParser(prog="python -m harness.cost payback", description="Payback and ROI of a migration.")
    p.add_argument("--before", type=_usd, required=True, help="monthly cost today (USD)")
    p.add_argument("--after", type=_usd, required=True, help="monthly cost after the migration (USD)")
    p.add_argument("--engineering", type=_usd, required=True, help="one-off engineering cost (USD)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    d = payback(a.before, a.after, a.engineering).to_dict()
    if a.json:
        print(json.dumps(d, indent=2))
        return 0
    months = "never (nothing saved)" if d["payback_months"] is None else f"{d['payback_months']:.1f} months"
    print(f"saving ${d['monthly_saving_usd']:,.0f} a month against ${d['engineering_usd']:,.0f} of engineering: "
          f"payback in {months}")
    for h, r in (d.get("roi") or {}).items():
        print(f"ROI over {h.replace('_', ' ')}: {r:+.0%}")
    return 0


def _snapshot(argv: list[str]) -> int:
    from harness.cost.prices import PriceListClient, has_credentials, load_snapshot, refresh_snapshot

    p = OneLineParser(prog="python -m harness.cost snapshot")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if not has_credentials():
        raise UsageError("no AWS credentials: the snapshot can only be refreshed live")
    new = refresh_snapshot(PriceListClient(), load_snapshot())  # PriceError: one line, exit 1
    write_json(a.out, new)
    print(f"wrote {a.out} ({len(new['instances'])} instances, {len(new['bedrock'])} Bedrock models, as of {new['as_of']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
