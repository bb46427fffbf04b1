"""``python -m harness.bench``: the command line of the load benchmark (see docs/bench.md)."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from harness.bench.api import run_bench
from harness.bench.spec import BenchSpec
from harness.endpoint import Endpoint, redact, split_credentials
from kit.cli import OneLineParser, one_line_errors


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of whole numbers >= 1, e.g. 1,16,64")
    return vals


def _rates(text: str):
    if text.strip() == "auto":
        return "auto"
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or any(not v > 0 or v != v or v == float("inf") for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated requests/s > 0 (e.g. 2,4,8) or 'auto'")
    return vals


def _pos(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: must be a number > 0")
        return v
    return parse


def _nonneg_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number >= 0")
    return int(text)


def _out_dir(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give a directory (an empty path would write "
                                         "into the current one)")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m harness.bench",
                       description="Load benchmark: closed-loop concurrency and open-loop Poisson sweeps "
                                   "with per-token metrics. Results: DIR/requests.jsonl, summary.json/csv.")
    tgt = ap.add_argument_group("target (exactly one)")
    tgt.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 "
                                        "(/v1 is appended when missing)")
    tgt.add_argument("--sagemaker-endpoint", metavar="NAME", help="SageMaker endpoint name")
    tgt.add_argument("--bedrock-model", metavar="ID", help="Bedrock model or inference profile id")
    ap.add_argument("--model", help="model id (OpenAI: default the first one /v1/models lists)")
    ap.add_argument("--region", help="AWS region (SageMaker, Bedrock)")
    ap.add_argument("--name", default=None, help="endpoint name written into every record")
    ap.add_argument("--concurrency", type=_ints, default=None,
                    help="closed-loop levels, default 1,16,64 (when --rate is not given)")
    ap.add_argument("--rate", type=_rates, default=None,
                    help="open-loop Poisson levels in requests/s, or 'auto' (double until saturated)")
    ap.add_argument("--profile", default="agent",
                    help="agent | 2k-512 | poisson-180-256 | IN-OUT (e.g. 512-128); default agent")
    cap = ap.add_mutually_exclusive_group(required=True)
    cap.add_argument("--requests", type=_pos(int), help="measured requests per level")
    cap.add_argument("--duration", type=_pos(float), help="seconds of measured sending per level")
    ap.add_argument("--out", required=True, type=_out_dir, help="output directory")
    ap.add_argument("--warmup", type=_nonneg_int, default=None,
                    help="warm-up requests per level (default: one per stream / ceil(rate))")
    ap.add_argument("--slo", default=None, help="e.g. ttft_p99_ms=800,itl_p99_ms=50 (docs/bench.md)")
    # --request-timeout: the name harness.accuracy (and harness.run --accuracy-request-timeout) give the
    # same thing, one request's whole deadline; --timeout still works
    ap.add_argument("--timeout", "--request-timeout", dest="timeout", type=_pos(float), default=300.0,
                    help="seconds per request (300)")
    ap.add_argument("--time-limit", type=_pos(float), default=3600.0,
                    help="hard limit in seconds for the whole run (3600)")
    ap.add_argument("--max-inflight", type=_pos(int), default=1024,
                    help="open loop: most requests in flight at once (1024)")
    ap.add_argument("--rate-start", type=_pos(float), default=1.0, help="--rate auto: first rate")
    ap.add_argument("--rate-max", type=_pos(float), default=256.0, help="--rate auto: last rate")
    ap.add_argument("--tokenizer", default=None,
                    help="tokenizer.json for per-chunk token counts when the server sends no usage")
    ap.add_argument("--no-vllm-extras", dest="vllm_extras", action="store_false",
                    help="send only standard OpenAI fields (no continuous_usage_stats, ignore_eos, min_tokens)")
    ap.add_argument("--path-probes", type=_nonneg_int, default=20,
                    help="small round trips (GET /models, or the cloud client's cheapest call) before "
                         "the levels, recorded as path_rtt_ms in summary.json (default 20; 0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true", help="continue DIR, skipping completed levels")
    ap.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    return ap


def _endpoint(args, ap) -> Endpoint:
    targets = [t for t in (args.base_url, args.sagemaker_endpoint, args.bedrock_model) if t]
    if len(targets) != 1:
        ap.error("give exactly one of --base-url, --sagemaker-endpoint, --bedrock-model")
    if args.base_url:
        # user:TOKEN@ in the URL is sent as HTTP Basic authentication, never printed or saved
        url, auth = split_credentials(args.base_url.rstrip("/"))
        if not url.startswith(("http://", "https://")):
            ap.error(f"--base-url {redact(args.base_url)!r}: must start with http:// or https://")
        if not url.endswith("/v1"):
            url += "/v1"
        model = args.model
        if not model:
            from harness.bench.clients.openai import discover_model
            try:
                model = asyncio.run(discover_model(url, api_key=os.environ.get("OPENAI_API_KEY"), auth=auth))
            except Exception as e:  # noqa: BLE001 - any failure to discover the model is one usage line
                ap.error(f"--model not given and {url}/models could not tell it: {redact(str(e))}")
        return Endpoint(name=args.name or "openai", protocol="openai", model_id=model, base_url=url, auth=auth)
    if args.sagemaker_endpoint:
        return Endpoint(name=args.name or args.sagemaker_endpoint, protocol="sagemaker",
                        service="sagemaker", model_id=args.model or "", region=args.region,
                        endpoint_name=args.sagemaker_endpoint)
    return Endpoint(name=args.name or "bedrock", protocol="bedrock",
                    service="bedrock", model_id=args.bedrock_model, region=args.region)


@one_line_errors("harness.bench")
def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.region is not None and not args.region.strip():  # '' would mean the shell's region
        ap.error("--region '': give a region code, e.g. us-east-1")
    endpoint = _endpoint(args, ap)
    if args.rate == "auto" and args.rate_start > args.rate_max:
        ap.error(f"--rate-start {args.rate_start:g} is above --rate-max {args.rate_max:g}: "
                 "--rate auto doubles from the one up to the other")
    try:
        levels = run_bench(endpoint, BenchSpec.from_args(args), out_dir=args.out,
                           api_key=os.environ.get("OPENAI_API_KEY"))
    except KeyboardInterrupt:
        print(f"harness.bench: interrupted; records so far are in {args.out}; --resume continues",
              file=sys.stderr)
        return 130
    if not args.quiet:
        print_table(levels)
    made = [n for n in ("summary.json", "summary.csv", "requests.jsonl") if (args.out / n).is_file()]
    print(f"results: {args.out}/" + ", ".join(made) if made else f"results: none written in {args.out}")
    import json
    try:
        not_run = json.loads((args.out / "bench.json").read_text()).get("levels_not_run") or []
    except (OSError, ValueError, AttributeError):
        not_run = ["(bench.json unreadable)"]
    if not_run:  # the run did not finish: that is the line, whatever completed before the limit
        print(f"harness.bench: --time-limit reached; not complete: {', '.join(not_run)} (--resume continues)"
              + ("" if any(lv.get("completed") for lv in levels) else "; no request completed before it"),
              file=sys.stderr)
        return 1
    nothing = measured_nothing(levels, args.out)
    if nothing:
        print(f"harness.bench: {nothing}", file=sys.stderr)
        return 3
    empty = [_label(lv) for lv in levels if not lv.get("completed") and lv.get("failed")]
    if empty:
        print(f"harness.bench: no request completed at {', '.join(empty)}: those levels have no latency or "
              f"throughput, only failures (errors by class in {args.out / 'summary.json'})", file=sys.stderr)
        return 1
    return 0


def _label(lv: dict) -> str:
    return f"c={lv['concurrency']}" if "concurrency" in lv else f"r={lv['rate']:g}/s"


def measured_nothing(levels: list[dict], out: Path) -> str | None:
    """The line to print when not one measured request completed (a server that is down, or
    refused every request): how many failed, by class, and the first failure's own words. None
    when something was measured. Exit 3: a dead server must not look like a measured one."""
    failed = sum(lv.get("failed") or 0 for lv in levels)
    if not failed or any(lv.get("completed") for lv in levels):
        return None  # something completed, or nothing ended at all (cut by --time-limit: exit 1 says so)
    classes: dict[str, int] = {}
    for lv in levels:
        for k, v in (lv.get("errors") or {}).items():
            classes[k] = classes.get(k, 0) + (v if isinstance(v, int) else 0)
    by = ", ".join(f"{k}: {v}" for k, v in sorted(classes.items(), key=lambda kv: -kv[1])) or "no class"
    detail = _first_detail(out)
    return (f"nothing was measured: all {failed} measured requests failed ({by})"
            + (f", e.g. {detail}" if detail else "") + f"; the records are in {out / 'requests.jsonl'}")


def _first_detail(out: Path) -> str:
    """The error detail of the first measured failed request in ``out``'s records ('' if none)."""
    from harness.results import read_records
    from kit.contracts.results import BENCH_REQUESTS

    for r in read_records(out / "requests.jsonl", BENCH_REQUESTS):
        if not r.get("warmup") and not r.get("ok") and isinstance(r.get("error_detail"), str):
            return " ".join(r["error_detail"].split())[:200]
    return ""


def print_table(levels: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="load benchmark")
    for col in ("level", "ok", "failed", "TTFT p50/p99 ms", "ITL p50/p99 ms", "TPOT p50 ms",
                "e2e p50 ms", "out tok/s", "req/s", "goodput req/s", "knee"):
        t.add_column(col, justify="right")

    def f(v, d=1):
        return "-" if v is None else f"{v:,.{d}f}"
    for lv in levels:
        label = f"c={lv['concurrency']}" if "concurrency" in lv else f"r={lv['rate']:g}/s"
        if not lv.get("complete"):
            label += " (cut)"
        t.add_row(label, str(lv["completed"]), str(lv["failed"]) + (
            " " + ",".join(f"{k}:{v}" for k, v in lv["errors"].items()) if lv["errors"] else ""),
            f"{f(lv['ttft_ms']['p50'])}/{f(lv['ttft_ms']['p99'])}",
            f"{f(lv['itl_ms']['p50'], 2)}/{f(lv['itl_ms']['p99'], 2)}", f(lv["tpot_ms"]["p50"], 2),
            f(lv["e2e_ms"]["p50"]), f(lv["output_tok_s"]), f(lv["request_s"], 2),
            f(lv["goodput_request_s"], 2), "<-" if lv.get("knee") else "")
    Console().print(t)
