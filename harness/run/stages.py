"""The stages of ``python -m harness.run``, as objects one loop runs in order.

Each stage has a ``name`` (what ``--only`` and meta.json's ``stages`` call it) and ``run(ctx)``,
which measures, writes its own files under the run directory and returns its status line for
meta.json (``ok (...)``, ``skipped: ...``, ``error: ...``). A stage that raises is recorded as
``error: ...`` by the loop and the next one runs; Ctrl-C ends the run with everything written so
far. What the stages share (the live endpoints, the run directory, the parsed options, the boto3
session, the seams tests use) is the ``RunContext``.
"""
from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.endpoint import Endpoint
from harness.results import append_record, write_file
from kit.contracts.results import AGENT_RUNS, META, SCOREBOARD

if TYPE_CHECKING:
    from harness.bench.spec import BenchSpec


@dataclass
class RunContext:
    args: argparse.Namespace
    run_dir: Path
    session: Any
    region: str | None
    creds: bool
    meta: dict[str, Any]
    echo: Callable[[str], None] = print
    live: list[Endpoint] = field(default_factory=list)  # the endpoints reached, in order
    records: list[Any] = field(default_factory=list)  # agent-trial RunRecords (also unreachable ones)
    board: dict[str, Any] | None = None  # the scoreboard, when it ran
    model_factory: Callable[[Endpoint], Any] | None = None  # Strands model per endpoint (seam)
    orchestrator: Any = None  # the scoreboard's orchestrating model (seam)
    retry_initial_delay: float = 2.0

    def models(self) -> Callable[[Endpoint], Any]:
        if self.model_factory is None:
            from harness.agent.providers import build_model

            args, session = self.args, self.session
            self.model_factory = lambda ep: build_model(ep, timeout=args.timeout, boto_session=session)
        return self.model_factory


class AgentStage:
    name = "agent"

    def run(self, ctx: RunContext) -> str:
        from harness.agent.trial import run_trial

        ctx.records += run_trial(ctx.live, runs=ctx.args.runs, model_factory=ctx.models(),
                                 out_path=ctx.run_dir / "agent_runs.jsonl", timeout=ctx.args.timeout,
                                 echo=ctx.echo, retry_initial_delay=ctx.retry_initial_delay)
        ok = sum(r.ok for r in ctx.records)
        ctx.echo(f"agent      {ok}/{len(ctx.records)} runs passed")
        return f"ok ({ok}/{len(ctx.records)} runs passed)"


class ScoreboardStage:
    name = "scoreboard"

    def run(self, ctx: RunContext) -> str:
        from harness.agent.scoreboard import format_board, run_scoreboard

        orchestrator = ctx.orchestrator
        if orchestrator is None:
            if not ctx.creds:
                status = "skipped: the orchestrating agent runs on Bedrock (needs AWS credentials)"
                ctx.echo(f"scoreboard {status}")
                return status
            from harness.agent.providers import build_model

            orchestrator = build_model(Endpoint("scoreboard", "bedrock", ctx.args.scoreboard_model,
                                                region=ctx.region),
                                       timeout=ctx.args.timeout, boto_session=ctx.session)
        board = run_scoreboard(ctx.live, orchestrator=orchestrator, model_factory=ctx.models(),
                               timeout=ctx.args.timeout, retry_initial_delay=ctx.retry_initial_delay)
        ctx.board = board
        write_file(ctx.run_dir / "scoreboard.json", SCOREBOARD, board)
        ctx.echo(format_board(board))
        return "ok" if not board["orchestrator_error"] else f"error: {board['orchestrator_error']}"


class BenchStage:
    name = "bench"

    def run(self, ctx: RunContext) -> str:
        return bench(ctx.live, ctx.run_dir, ctx.args, ctx.echo, ctx.meta)


class AccuracyStage:
    name = "accuracy"

    def run(self, ctx: RunContext) -> str:
        from harness.accuracy.stage import run_stage

        return run_stage(ctx.live, ctx.run_dir, ctx.args.accuracy_opts, boto_session=ctx.session, echo=ctx.echo)


class CostStage:
    name = "cost"

    def run(self, ctx: RunContext) -> str:
        from harness.cost.prices import PriceBook
        from harness.cost.run_cost import cost_for_run

        cost = cost_for_run(ctx.run_dir, PriceBook.auto())
        ctx.echo(f"cost       wrote {ctx.run_dir / 'cost.json'} ({len(cost.get('endpoints', {}))} endpoints)")
        return "ok"


class ReportStage:
    name = "report"

    def run(self, ctx: RunContext) -> str:
        from harness.report import render

        md, html = render(ctx.run_dir)
        ctx.echo(f"report     wrote {md} and {html}")
        return "ok"


# In the order they run; harness.run's STAGES (what --only accepts) is their names.
STAGE_OBJECTS = (AgentStage(), ScoreboardStage(), BenchStage(), AccuracyStage(), CostStage(), ReportStage())
# Stages that talk to the backends: only they need the tunnels opened.
REACHES_BACKENDS = ("agent", "scoreboard", "bench", "accuracy")


def run_stages(ctx: RunContext, names: list[str]) -> None:
    """Run the named stages in order, each status into meta.json as it ends; a stage that raises
    is recorded and the next one runs. KeyboardInterrupt goes to the caller."""
    for stage in (s for s in STAGE_OBJECTS if s.name in names):
        try:
            status = stage.run(ctx)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a stage that fails is recorded, the rest go on
            status = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            ctx.echo(f"{stage.name:<10} {status}")
        ctx.meta["stages"][stage.name] = status
        write_file(ctx.run_dir / "meta.json", META, ctx.meta)


# --------------------------------------------------------------------------- the bench stage
def bench(endpoints: list[Endpoint], run_dir: Path, args: argparse.Namespace,
                 echo: Callable[[str], None], meta: dict[str, Any]) -> str:
    from harness.access.tunnel import forwarder_for
    from harness.bench.api import run_bench
    from harness.bench.remote import run_remote_bench

    spec: BenchSpec = args.bench_spec  # built and checked with the other options (run/cli.py)
    failed = []
    for ep in endpoints:
        echo(f"bench      {ep.name}: profile {args.bench_profile}, concurrency {args.concurrency or '-'}"
             f"{', rates ' + args.rate if args.rate else ''}, {args.bench_requests} requests per level")
        fwd = forwarder_for(ep.base_url) if args.bench_from == "instance" else None
        if args.bench_from == "instance" and fwd is None:
            echo(f"bench      {ep.name}: not reached through a tunnel; the bench runs here")
        try:
            if fwd is not None:
                echo(f"bench      {ep.name}: running on the instance ({ep.instance_id}) against 127.0.0.1:{ep.port}")
                levels = run_remote_bench(fwd, ep, run_dir / "bench" / ep.name, remote_port=fwd.remote[1],
                                          spec=spec, echo=echo)
            else:
                levels = run_bench(ep, spec, out_dir=run_dir / "bench" / ep.name)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, the next backend runs
            failed.append(ep.name)
            echo(f"bench      {ep.name}: error: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        path = next((lv.get("path_rtt_ms") for lv in levels if lv.get("path_rtt_ms")), None)
        meta.setdefault("bench", {})[ep.name] = {"path_rtt_ms": path,
                                                 "from": "instance" if fwd is not None else "local"}
        if path and path.get("n"):
            echo(f"bench      {ep.name}: path round trip p50 {path['p50']} ms, p99 {path['p99']} ms "
                 f"(n={path['n']}, {path.get('how')})")
        for lv in levels:
            where = f"c={lv['concurrency']}" if lv.get("concurrency") is not None else f"rate={lv.get('rate')}"
            echo(f"bench      {ep.name:<10} {where:<9} completed={lv.get('completed')} failed={lv.get('failed')} "
                 f"output_tok_s={lv.get('output_tok_s')}")
    done = len(endpoints) - len(failed)
    return f"ok ({done}/{len(endpoints)} endpoints)" + (f"; failed: {', '.join(failed)}" if failed else "")


# --------------------------------------------------------------------------- access
def open_access(endpoints: list[Endpoint], stack: contextlib.ExitStack, session: Any, region: str | None,
                 args: argparse.Namespace, run_dir: Path, records: list[Any], meta: dict[str, Any],
                 echo: Callable[[str], None], open_access: Callable[..., Any] | None,
                 unreachable: dict[str, str] | None = None) -> list[Endpoint]:
    """EC2 backends get a tunnel (closed by ``stack``); one that cannot be reached (or an
    ``--endpoint`` server in ``unreachable``) is recorded in meta.json ``access`` (and, when the
    agent trial runs, as a failed run in agent_runs.jsonl) and left out of every stage."""
    from harness.access.tunnel import DEFAULT_OS_USER, HostKeyPins, eic_tunnel, forwarder_kind

    pins = HostKeyPins()
    live: list[Endpoint] = []
    unreachable = unreachable or {}
    for ep in endpoints:
        if ep.name in unreachable:
            record_unreachable(ep, f"unreachable: {unreachable[ep.name]}", args, run_dir, records, meta, echo)
            continue
        if ep.instance_id is None or ep.base_url:  # only an EC2 instance is reached by a tunnel
            live.append(ep)
            continue
        opener = open_access or (lambda e: eic_tunnel(
            e, botocore_session=session._session, region=e.region or region, pins=pins,
            os_user=args.os_user or e.ssh_user or DEFAULT_OS_USER,
            forwarder=getattr(args, "forwarder", "auto")))
        try:
            live.append(stack.enter_context(opener(ep)))
            kind = forwarder_kind(live[-1].base_url)
            meta.setdefault("access", {})[ep.name] = f"{ep.instance_id}:{ep.port} via EC2 Instance Connect" + \
                (f" ({kind} forwarder)" if kind else "")
            echo(f"access     {ep.name}: {ep.instance_id}:{ep.port} -> {live[-1].base_url}")
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001
            record_unreachable(ep, f"access failed: {str(exc)[:300]}", args, run_dir, records, meta, echo)
    return live


def record_unreachable(ep: Endpoint, msg: str, args: argparse.Namespace, run_dir: Path,
                        records: list[Any], meta: dict[str, Any], echo: Callable[[str], None]) -> None:
    from harness.agent.trial import RunRecord

    meta.setdefault("access", {})[ep.name] = msg
    echo(f"access     {ep.name}: {msg}")
    if "agent" not in args.stages:
        return
    rec = RunRecord(ep.name, 1, args.runs, ok=False, mode="tools" if ep.tool_calls else "plain",
                    protocol=ep.protocol, model_id=ep.model_id, started_at=time.time(), error=msg,
                    unreachable=True)
    records.append(rec)
    append_record(run_dir / "agent_runs.jsonl", AGENT_RUNS, rec.to_dict())
