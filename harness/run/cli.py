"""``python -m harness.run``: discovery -> access -> agent trial -> scoreboard -> bench -> cost -> report.

    python -m harness.run                                  # everything deployed in the region
    python -m harness.run --only agent --runs 5            # just the agent trial
    python -m harness.run --endpoint laptop=http://127.0.0.1:8000/v1 --only agent
    python -m harness.run --outputs-file cdk-outputs.json --json out.json

Without AWS credentials and without ``--endpoint`` it prints the offline plan (what would be
measured and what it would cost, from the dated price snapshot) and one line saying what it needs,
and exits 0. Results go to ``results/<run-id>/`` as they are measured (see ``harness.results``);
Ctrl-C keeps everything already written and closes every tunnel.

This module imports neither aws-cdk-lib nor torch: ``make run`` installs the lean requirements.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kit import catalog, variants
from harness.endpoint import Endpoint, redact
from harness.results import DEFAULT_ROOT, new_run_dir, writable_problem, write_file
from kit.contracts.results import META, RUN_SUMMARY
from harness.run import stages
from harness.run.stages import REACHES_BACKENDS, STAGE_OBJECTS, RunContext, run_stages
from kit.cli import OneLineParser, one_line_errors
from kit.errors import CommandFailed, UsageError

STAGES = tuple(s.name for s in STAGE_OBJECTS)  # harness/run/stages.py, in the order they run
OFF_BY_DEFAULT = ("accuracy",)  # takes time: --accuracy or --only accuracy
NEEDS = ("needs AWS credentials (aws configure, or AWS_PROFILE) and a deployed backend stack "
         "(npx cdk deploy G6Stack), or --endpoint NAME=URL for any OpenAI-compatible server")


def _nonempty_path(text: str) -> Path:
    if not text.strip():  # Path('') is '.': the current directory, silently
        raise argparse.ArgumentTypeError(f"{text!r}: give a path")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m harness.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--region", help="the kit's region (default: cdk.json context region; the shell's "
                                    "AWS_REGION is not used, see kit/regions.py); <id>_region "
                                    "in cdk.json moves one backend")
    p.add_argument("--outputs-file", type=_nonempty_path, help="cdk deploy --outputs-file JSON instead of CloudFormation")
    p.add_argument("--endpoint", action="append", default=[], metavar="NAME=URL",
                   help="an OpenAI-compatible server to include (repeatable)")
    p.add_argument("--model", action="append", default=[], metavar="[NAME=]MODEL_ID",
                   help="model id for --endpoint servers (default: first of GET /v1/models)")
    p.add_argument("--plain", action="append", default=[], metavar="NAME",
                   help="treat an --endpoint server as having no tool calling (plain-text variant)")
    p.add_argument("--backends", help=f"only these catalog backends (each with its variants; <id>@<variant> names one variant), comma-separated: {','.join(catalog.BACKEND_IDS)}")
    p.add_argument("--only", action="append", default=[], metavar="STAGE",
                   help=f"run only these stages (repeatable or comma-separated): {', '.join(STAGES)}")
    p.add_argument("--runs", type=int, default=3, help="agent-trial runs per backend (default 3)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per agent run / question (default 120)")
    p.add_argument("--results", type=_nonempty_path, default=DEFAULT_ROOT, help="results root (default results/)")
    p.add_argument("--json", type=_nonempty_path, metavar="PATH", help="also write a JSON summary here")
    p.add_argument("--scoreboard-model", default=catalog.NOVA_MICRO,
                   help=f"Bedrock model of the scoreboard agent (default {catalog.NOVA_MICRO})")
    p.add_argument("--os-user", default=None, help="OS user for EC2 Instance Connect (default: stack output, else ubuntu)")
    p.add_argument("--forwarder", choices=("auto", "openssh", "paramiko"), default="auto",
                   help="what carries an EC2 backend's tunnel: OpenSSH's ssh (auto: where installed) "
                        "or the kit's paramiko process (harness/access/tunnel.py)")
    b = p.add_argument_group("load benchmark (stage bench; docs/bench.md)")
    # --profile and --requests are harness.bench's names for the same things (one name per concept
    # across the kit's commands); --bench-profile and --bench-requests still work.
    b.add_argument("--bench-profile", "--profile", dest="bench_profile", default="agent",
                   help="agent, 2k-512, poisson-180-256 or IN-OUT (default agent)")
    b.add_argument("--concurrency", default="1,16,64", help="closed-loop levels (default 1,16,64); '' for none")
    b.add_argument("--rate", default="", help="open-loop Poisson levels in requests/s, or auto (default none)")
    b.add_argument("--bench-requests", "--requests", dest="bench_requests", type=int, default=128,
                   help="measured requests per level (default 128)")
    b.add_argument("--slo", default="ttft_p99_ms=800", help="goodput SLO (default ttft_p99_ms=800)")
    b.add_argument("--bench-from", choices=("local", "instance"), default="local",
                   help="where the load generator runs for EC2 backends: here, through the tunnel "
                        "(local, default), or on the backend's own instance against its loopback "
                        "(instance: the bench is shipped over the tunnel's SSH connection; "
                        "harness/bench/remote.py). Other backends always run here.")
    from harness.accuracy.stage import add_stage_options

    add_stage_options(p)
    return p


# Options read by one stage only (or by EC2 backends only): given while nothing reads them, they
# would be silently ignored and the user left believing e.g. that accuracy was measured.
STAGE_OPTIONS: dict[str, tuple[str, ...]] = {
    "bench": ("bench_profile", "concurrency", "rate", "bench_requests", "slo", "bench_from"),
    "scoreboard": ("scoreboard_model",),
    "agent": ("runs",),
}
EC2_ONLY = ("os_user", "forwarder")  # what reaches an EC2 instance (harness/access/tunnel.py); also --bench-from instance


def given_options(argv: list[str] | None) -> dict[str, str]:
    """dest -> the option as spelled (e.g. ``accuracy_items`` -> ``--accuracy-items``) of every
    option given on the command line (argparse's own parse, so abbreviations count too)."""
    p = build_parser()
    flags = {}
    typed = [a.split("=", 1)[0] for a in (argv or []) if a.startswith("--")]
    for act in p._actions:  # argparse keeps its actions here (a parser of our own, changed only here)
        act.default = argparse.SUPPRESS
        if act.option_strings:  # as the user spelled it (--bench-requests or --requests), else the name
            flags[act.dest] = next((s for s in act.option_strings if s in typed), act.option_strings[-1])
    return {dest: flags.get(dest, dest) for dest in vars(p.parse_args(argv))}


def _stage_unused(a: argparse.Namespace, given: dict[str, str]) -> str | None:
    """The first option given for a stage that does not run, as one line."""
    options = {**STAGE_OPTIONS, "accuracy": tuple(d for d in given if d.startswith("accuracy_"))}
    for stage, dests in options.items():
        for d in dests:
            if d in given and stage not in a.stages:
                how = "add --accuracy, or " if stage == "accuracy" else ""
                return (f"{given[d]} is read by the {stage} stage, which does not run "
                        f"(stages: {', '.join(a.stages) or 'none'}); {how}add {stage} to --only, or drop "
                        f"{given[d]}")
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    a = build_parser().parse_args(argv)
    a.given = given_options(argv)
    if a.region is not None and not a.region.strip():  # '' would silently mean cdk.json's region
        raise UsageError("--region '': give a region code, e.g. us-east-1, or leave "
                         "--region out for cdk.json's region")
    stages: list[str] = []
    for v in a.only:
        for s in (x.strip() for x in v.split(",")):
            if s not in STAGES:
                raise UsageError(f"--only {s!r} is not a stage; valid: {', '.join(STAGES)}")
            stages.append(s)
    a.stages = [s for s in STAGES if s in stages] if stages else \
        [s for s in STAGES if s not in OFF_BY_DEFAULT or getattr(a, s, False)]
    unused = _stage_unused(a, a.given)
    if unused:
        raise UsageError(unused)
    if "accuracy" in a.stages:
        from harness.accuracy.stage import check_stage_options

        a.accuracy_opts = check_stage_options(a)
    if a.runs < 1:
        raise UsageError(f"--runs {a.runs}: must be >= 1")
    if not math.isfinite(a.timeout) or a.timeout <= 0:  # argparse's float takes nan and inf
        raise UsageError(f"--timeout {a.timeout:g}: must be a finite number of seconds > 0")
    a.backend_ids = None
    if a.backends:
        a.backend_ids = [b.strip() for b in a.backends.split(",") if b.strip()]
        for b in a.backend_ids:
            base, variant = variants.split(b)  # g6@bf16: one variant stack (kit/variants.py)
            if base not in catalog.BACKENDS or (variant is not None and not variants.NAME.match(variant)):
                raise UsageError(f"--backends: unknown backend {b!r}; valid: {', '.join(catalog.BACKEND_IDS)}"
                                 " (a backend takes its variants too; <id>@<variant> names one)")
            if variant is not None and base not in variants.backends_with_variants():
                raise UsageError(f"--backends {b!r}: {base} has no variants (its model is not "
                                 "configuration); <id>@<variant> names a variant of "
                                 f"{', '.join(variants.backends_with_variants())}; give {base} alone")
    _parse_bench_args(a)
    from harness.discovery import DiscoveryError, check_endpoint_names, load_outputs_file

    try:
        check_endpoint_names(a.endpoint, a.model, a.plain)
        # read and checked now, with or without credentials: a bad file is bad input either way
        a.outputs = load_outputs_file(a.outputs_file) if a.outputs_file else None
    except DiscoveryError as e:
        raise UsageError(str(e)) from None
    return a


def check_writable(a: argparse.Namespace) -> None:
    """--results and --json can be written, checked before anything is measured."""
    for flag, path, directory in (("--results", a.results, True), ("--json", a.json, False)):
        problem = path is not None and writable_problem(path, directory=directory)
        if problem:
            raise UsageError(f"{flag} {path}: {problem}; give a writable path")


def _parse_bench_args(a: argparse.Namespace) -> None:
    """Bench options checked up front, so a typo fails before anything is measured."""
    try:
        a.concurrency_levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
        a.rates = "auto" if a.rate.strip() == "auto" else [float(x) for x in a.rate.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {a.concurrency!r} / --rate {a.rate!r}: comma-separated "
                         "numbers (e.g. 1,16,64 and 2,4,8 or auto)") from None
    if any(c < 1 for c in a.concurrency_levels) or \
            (a.rates != "auto" and any(not (math.isfinite(r) and r > 0) for r in a.rates)):
        raise UsageError("--concurrency levels must be >= 1 and --rate levels finite and > 0")
    if a.bench_requests < 1:
        raise UsageError(f"--requests {a.bench_requests}: must be >= 1")
    a.bench_spec = None
    if "bench" in a.stages:
        from harness.bench.spec import BenchError, BenchSpec

        try:
            a.bench_spec = BenchSpec(profile=a.bench_profile, concurrency=tuple(a.concurrency_levels),
                                     rates=a.rates, requests=a.bench_requests, slo=a.slo)
        except BenchError as e:  # named as this command spells the option
            raise UsageError(str(e)) from None


# --------------------------------------------------------------------------- the offline plan
def offline_plan_text(kit: Any = None) -> str:
    """What would be measured and what it would cost, from the dated price snapshot, priced in
    each backend's region (``kit``: kit/regions.py KitRegions; default: cdk.json's)."""
    from harness.cost.breakeven import format_plan, offline_plan
    from harness.cost.prices import PriceBook
    from kit.regions import resolve

    kit = kit or resolve()
    book = PriceBook.auto(offline=True)
    from harness.cost.placements import configured_fit_lines

    plan = offline_plan(5.0, book, backend_regions={b: kit.of(b) for b in catalog.BACKEND_IDS})
    return (f"plan in {kit.describe()}\n" + format_plan(plan, 5.0, book.notes) + "\n\n"
            + "\n".join(configured_fit_lines()))


def _has_credentials(session: Any) -> bool:
    try:
        return session.get_credentials() is not None
    except Exception:  # noqa: BLE001 - a broken profile is no credentials
        return False


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("strands-agents", "boto3", "paramiko", "websockets", "openai"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


def discover(args: argparse.Namespace, kit: Any, session: Any, creds: bool
             ) -> tuple[list[Endpoint], list[str], dict[str, str]]:
    """What is measured: the deployed backends (``--outputs-file``, else CloudFormation in the
    kit's regions when there are credentials) and the ``--endpoint`` servers; with the notes
    discovery made and the ``--endpoint`` servers whose model id could not be probed (recorded
    as unreachable and skipped, like a backend whose tunnel fails; the others run). Bad input is
    a DiscoveryError or UsageError (exit 2); any other failure, e.g. expired credentials, one
    line and exit 1."""
    from harness.discovery import Discovery, DiscoveryError, from_endpoint_args, from_outputs, from_regions

    unreachable: dict[str, str] = {}
    try:
        local = from_endpoint_args(args.endpoint, args.model, args.plain, unreachable=unreachable)
        if args.outputs is not None:
            d = from_outputs(args.outputs, kit.region, args.backend_ids)
        elif creds:
            d = from_regions(lambda r: session.client("cloudformation", region_name=r), kit, args.backend_ids)
        else:
            d = Discovery()
    except DiscoveryError:  # bad input: exit 2
        raise
    except Exception as e:  # noqa: BLE001 - e.g. expired credentials: one line, not a traceback
        raise CommandFailed(f"discovery failed in {', '.join(kit.regions)}: {type(e).__name__}: "
                            f"{str(e)[:300]}") from None
    aws_eps = d.endpoints
    if aws_eps and not creds:
        d.notes += [f"{e.name}: skipped, needs AWS credentials" for e in aws_eps]
        aws_eps = []
    clash = sorted({e.name for e in aws_eps} & {e.name for e in local})
    if clash:
        raise UsageError(f"--endpoint name {clash[0]!r} is also a deployed backend; choose another NAME")
    return aws_eps + local, d.notes, unreachable


# --------------------------------------------------------------------------- main
@one_line_errors("harness.run")
def main(argv: list[str] | None = None, *, session: Any = None,
         model_factory: Callable[[Endpoint], Any] | None = None, orchestrator: Any = None,
         open_access: Callable[..., Any] | None = None, echo: Callable[[str], None] = print,
         retry_initial_delay: float = 2.0) -> int:
    """Entry point: parse, resolve the region, discover, then run the stages (harness/run/stages.py).
    Keyword arguments are seams for tests (boto3 session, Strands models, the access opener); a
    real run leaves them unset."""
    opener = open_access
    args = parse_args(argv)  # bad input: UsageError, one line and exit 2 at the door
    # Strands logs each recoverable model/tool problem as a warning; the trial records them in
    # agent_runs.jsonl, so the terminal keeps to one line per run.
    logging.getLogger("strands").setLevel(logging.ERROR)
    from kit.regions import resolve

    kit = resolve(args.region)  # the one region resolution the stacks were deployed with (kit/regions.py)
    region = kit.region
    if session is None:
        import boto3

        session = boto3.Session(region_name=region)
    creds = _has_credentials(session)
    if creds or not args.endpoint:  # where discovery looks, or what the plan prices
        echo(f"region     {kit.describe()}")
        shell = kit.shell_note(os.environ)
        if shell:
            echo(f"note       {shell}")

    asked = [args.given[d] for d in args.given if d not in ("region", "results", "json")]
    if not creds and not args.endpoint:
        echo(offline_plan_text(kit))
        echo("")
        if not asked:  # the bare command: the offline plan is what it is for
            echo(f"harness.run: nothing measured: {NEEDS}.")
            return 0
        # options that ask for a measurement: this command could not do its job
        raise CommandFailed(f"nothing measured: no AWS credentials were found (aws configure, or AWS_PROFILE) "
                            f"and no --endpoint was given, so {', '.join(asked[:4])} had no backend to act on; "
                            "deploy a backend stack and configure credentials, or pass --endpoint NAME=URL")
    ec2 = [args.given[d] for d in EC2_ONLY if d in args.given]
    ec2 += ["--bench-from instance"] if args.bench_from == "instance" else []
    if not creds and ec2:  # only --endpoint servers: nothing is reached through EC2 Instance Connect
        raise UsageError(f"{ec2[0]} applies to EC2 backends, which are found and reached with AWS credentials, "
                         "and none were found (aws configure, or AWS_PROFILE); drop it to measure only the "
                         "--endpoint servers")

    check_writable(args)
    endpoints, notes, unreachable = discover(args, kit, session, creds)
    for n in notes:
        echo(f"discovery  {n}")
    if not endpoints:
        echo(f"harness.run: no backend deployed in {', '.join(kit.regions)} and no --endpoint given; "
             "deploy one (npx cdk deploy G6Stack) or pass --endpoint NAME=URL.")
        return 0

    run_dir = new_run_dir(args.results)
    meta: dict[str, Any] = {"run_id": run_dir.name, "started_at": time.time(), "region": region,
                            # an --endpoint URL's credentials are never saved (harness.endpoint)
                            "argv": [redact(x) for x in (sys.argv[1:] if argv is None else argv)], "stages": {},
                            "endpoints": [e.to_dict() for e in endpoints], "notes": notes,
                            "versions": _versions(), "interrupted": False}
    write_file(run_dir / "meta.json", META, meta)
    echo(f"results    {run_dir}")
    ctx = RunContext(args, run_dir, session, region, creds, meta, echo=echo, model_factory=model_factory,
                     orchestrator=orchestrator, retry_initial_delay=retry_initial_delay)
    rc = 0
    with contextlib.ExitStack() as stack:
        try:
            if any(st in args.stages for st in REACHES_BACKENDS):
                ctx.live = stages.open_access(endpoints, stack, session, region, args, run_dir, ctx.records, meta,
                                              echo, opener, unreachable)
            else:  # cost and report read saved results only: no tunnel needed
                ctx.live = [e for e in endpoints if e.name not in unreachable]
            if unreachable and not ctx.live:
                echo(f"harness.run: no endpoint reachable; what was tried is in {run_dir}")
                rc = 1
            if ctx.live and any(st in args.stages for st in REACHES_BACKENDS):
                from harness.run.weights import collect

                # what each serves: model, commit, config+tokenizer digest (harness/run/weights.py)
                meta["weights"] = collect(ctx.live, echo)
                write_file(run_dir / "meta.json", META, meta)
            run_stages(ctx, args.stages)
        except KeyboardInterrupt:
            meta["interrupted"] = True
            echo(f"\ninterrupted: everything measured so far is in {run_dir}")
            rc = 130
        finally:
            meta["ended_at"] = time.time()
            write_file(run_dir / "meta.json", META, meta)
            if args.json:  # after the results directory: a failure here loses no measurement
                try:
                    write_file(args.json, RUN_SUMMARY, {"results_dir": str(run_dir),
                                           "agent_runs": [r.to_dict() for r in ctx.records],
                                           "scoreboard": ctx.board, "stages": meta["stages"],
                                           "interrupted": meta["interrupted"]})
                except OSError as e:
                    print(f"harness.run: --json {args.json}: not written ({e.strerror or e}); "
                          f"every result is in {run_dir}", file=sys.stderr)
                    rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
