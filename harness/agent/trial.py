"""The agent trial: one Strands agent, one question, ``count_ids``, scored on number AND filter.

A run is ``ok`` only when the final answer quotes 8 and the last successful ``count_ids`` call
used exactly the filter ``id >= 10``. Backends without tool calling get a plain-text variant (the
table is in the prompt; only the number is scored) and their lines say so.

Every run is appended to ``agent_runs.jsonl`` as soon as it finishes (tokens, latency, tool
calls, raw answer, error), so a crash, a dead backend or Ctrl-C loses nothing already measured.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from strands import Agent, ModelRetryStrategy, tool

from harness.agent import count_ids as cid
from harness.agent.bounded import run_bounded
from harness.endpoint import Endpoint
from harness.results import append_record
from kit.contracts.results import AGENT_RUNS

SYSTEM_PROMPT = ("You answer questions about the inventory table using the tools you are given. "
                 "Finish with a line 'Answer: <number>'.")
PLAIN_SYSTEM_PROMPT = cid.PLAIN_SYSTEM_PROMPT
plain_question = cid.plain_question
# Characters of one stored tool-call argument (as JSON text). What a model asked for is its input,
# untrusted: one 20 MB argument made agent_runs.jsonl 63 MB per run and the report 42 MB.
ARG_CAP = 4096


def capped(value: Any, cap: int = ARG_CAP) -> Any:
    """``value``, or, when its JSON text is longer than ``cap``, a marker of truncation with the
    text's first ``cap`` characters and its full length (a string: its head and a marker)."""
    if isinstance(value, str):
        return value if len(value) <= cap else f"{value[:cap]}…[truncated: {len(value)} chars]"
    text = json.dumps(value, default=str)
    if len(text) <= cap:
        return value
    return {"truncated": True, "chars": len(text), "head": text[:cap]}


@dataclass
class RunRecord:
    backend: str
    run: int
    runs: int
    ok: bool
    mode: str  # "tools" or "plain" (no tool calling on this backend)
    quoted: int | None = None
    expected: int = cid.EXPECTED_COUNT
    filters: list[str] | None = None  # filters of the last successful count_ids call
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # what the model asked for
    tool_results: list[dict[str, Any]] = field(default_factory=list)  # what count_ids saw/returned
    seconds: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    throttled: int = 0  # throttling responses received (each but the last retried with backoff)
    answer: str = ""
    error: str | None = None
    unreachable: bool = False  # connection-level failure or timeout: the backend's runs stop
    protocol: str = ""
    model_id: str = ""
    started_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """As stored (agent_runs.jsonl, --json): every argument the model chose is ``capped``."""
        d = asdict(self)
        d["tool_calls"] = [c | {"input": capped(c.get("input"))} for c in d["tool_calls"]]
        d["tool_results"] = [{k: capped(v) if k in ("filters", "error") else v for k, v in r.items()}
                             for r in d["tool_results"]]
        d["filters"] = capped(d["filters"]) if d["filters"] is not None else None
        return d

    def line(self) -> str:
        status = "ok" if self.ok else ("ERR" if self.error else "FAIL")
        head = f"{self.backend:<10} run {self.run}/{self.runs}  {status:<4}"
        if self.error:
            return f"{head} error: {self.error}  {self.seconds:.2f}s"
        what = "filters=(plain-text variant, no tool calling)" if self.mode == "plain" \
            else f"filters={capped(self.filters if self.filters is not None else [], 300)}"
        return f"{head} quoted={self.quoted}  {what}  {self.seconds:.2f}s"


def score(mode: str, quoted: int | None, filters: list[str] | None) -> bool:
    if quoted != cid.EXPECTED_COUNT:
        return False
    return mode == "plain" or cid.is_expected_filters(filters)


class CountingRetry(ModelRetryStrategy):
    """Strands' retry strategy (exponential backoff on throttling) that counts the throttling
    responses it saw, so a record shows how hard the backend pushed back."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.throttled = 0

    def is_retryable(self, exception: Exception) -> bool:
        yes = super().is_retryable(exception)
        self.throttled += int(yes)
        return yes


def _make_tool(results: list[dict[str, Any]]):
    @tool
    def count_ids(filters: list[str]) -> dict:
        """Count the records of the inventory table (11 rows) that match every filter.

        Args:
            filters: conditions combined with AND, each '<field> <op> <integer>' with op one of
                >=, >, <=, <, ==, != (for example "id >= 10").
        """
        try:
            out = cid.count(filters)
        except cid.FilterError as e:
            results.append({"filters": filters, "error": str(e)})
            raise
        results.append({"filters": list(filters), "count": out["count"]})
        return out

    return count_ids


def _tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        for block in msg.get("content", []):
            use = block.get("toolUse") if isinstance(block, dict) else None
            if use:
                calls.append({"name": use.get("name"), "input": use.get("input")})
    return calls


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _unreachable(exc: BaseException) -> bool:
    """Connection-level failures: the backend is down, further runs would only wait."""
    names = {c.__name__ for c in type(exc).__mro__}
    cause = exc.__cause__ or exc.__context__
    return bool(names & {"APIConnectionError", "EndpointConnectionError", "ConnectionError",
                         "ConnectTimeoutError", "TimeoutError"}) or \
        (cause is not None and cause is not exc and _unreachable(cause))


def run_once(endpoint: Endpoint, run: int, runs: int, *, model: Any, timeout: float,
             retry_attempts: int = 6, retry_initial_delay: float = 2.0,
             retry_max_delay: float = 60.0) -> RunRecord:
    """One agent run against ``model`` (a Strands Model for ``endpoint``); never raises
    except KeyboardInterrupt."""
    mode = "tools" if endpoint.tool_calls else "plain"
    rec = RunRecord(endpoint.name, run, runs, ok=False, mode=mode, protocol=endpoint.protocol,
                    model_id=endpoint.model_id, started_at=time.time())
    results: list[dict[str, Any]] = []
    retry = CountingRetry(max_attempts=retry_attempts, initial_delay=retry_initial_delay,
                          max_delay=retry_max_delay)
    if mode == "tools":
        agent = Agent(model=model, tools=[_make_tool(results)], system_prompt=SYSTEM_PROMPT,
                      callback_handler=None, retry_strategy=retry)
        prompt = cid.QUESTION
    else:
        agent = Agent(model=model, tools=[], system_prompt=PLAIN_SYSTEM_PROMPT,
                      callback_handler=None, retry_strategy=retry)
        prompt = plain_question()
    t0 = time.perf_counter()
    try:
        result = run_bounded(agent.invoke_async(prompt), timeout)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any backend failure is recorded, not raised
        rec.error = _error_text(exc)
        rec.unreachable = _unreachable(exc)
        result = None
    rec.seconds = round(time.perf_counter() - t0, 3)
    rec.throttled = retry.throttled
    rec.tool_calls = _tool_calls(agent.messages)
    rec.tool_results = results
    if result is not None:
        rec.answer = str(result).strip()
        usage = result.metrics.accumulated_usage or {}
        rec.input_tokens = usage.get("inputTokens")
        rec.output_tokens = usage.get("outputTokens")
        rec.total_tokens = usage.get("totalTokens")
        rec.quoted = cid.quoted_number(rec.answer)
        good = [r for r in results if "error" not in r]
        rec.filters = good[-1]["filters"] if good else ([] if mode == "tools" else None)
        rec.ok = score(mode, rec.quoted, rec.filters)
    return rec


ModelFactory = Callable[[Endpoint], Any]


def run_trial(endpoints: Iterable[Endpoint], *, runs: int = 3, model_factory: ModelFactory,
              out_path: Path | None = None, timeout: float = 120.0,
              echo: Callable[[str], None] = print, **retry: Any) -> list[RunRecord]:
    """``runs`` runs per endpoint; each record is appended to ``out_path`` as it finishes.

    A backend that cannot be reached is recorded once and the next backend runs.
    """
    records: list[RunRecord] = []
    for ep in endpoints:
        for i in range(1, runs + 1):
            try:
                model = model_factory(ep)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001
                rec = RunRecord(ep.name, i, runs, ok=False, mode="tools" if ep.tool_calls else "plain",
                                protocol=ep.protocol, model_id=ep.model_id, started_at=time.time(),
                                error=f"model set-up failed: {_error_text(exc)}")
                rec.unreachable = True
            else:
                rec = run_once(ep, i, runs, model=model, timeout=timeout, **retry)
            records.append(rec)
            if out_path is not None:
                append_record(out_path, AGENT_RUNS, rec.to_dict())
            echo(rec.line())
            if rec.unreachable:
                if i < runs:
                    echo(f"{ep.name:<10} skipping runs {i + 1}-{runs}: backend unreachable")
                break
    return records
