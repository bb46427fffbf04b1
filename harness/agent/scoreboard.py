"""The scoreboard agent (seed): an agent on Bedrock whose tools are the deployed backends.

Each tool ``ask_<backend>(question)`` asks its backend a short question and measures wall-clock
seconds and ``wall_tok_s`` itself: the answer's output tokens / those seconds (prefill and the
agent framework included; not the bench's ``output_tok_s`` of a level nor the cost's
``decode_tok_s`` of one stream). The table is built by this code from those
measurements and sorted by seconds here, not by the model: the orchestrating model decides only
which tools to call, so it can neither misquote a timing nor reorder the board.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from harness.agent.bounded import run_bounded
from harness.endpoint import Endpoint

QUESTION = "What is the capital of France? Answer in one word."
SYSTEM_PROMPT = ("You run a scoreboard. Call every ask_ tool exactly once, each with the question "
                 "you are given, then reply with the single word: done.")


@dataclass
class Score:
    backend: str
    label: str
    answer: str | None = None
    seconds: float | None = None
    output_tokens: int | None = None
    wall_tok_s: float | None = None  # output tokens / wall-clock seconds of this one answer
    error: str | None = None
    called: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tool_name(backend: str) -> str:
    return "ask_" + re.sub(r"[^A-Za-z0-9_]", "_", backend)[:56]


def ask(endpoint: Endpoint, model: Any, question: str, timeout: float) -> Score:
    """One short question to one backend through a tool-less Strands agent, timed here."""
    from strands import Agent

    s = Score(endpoint.name, endpoint.label or endpoint.name, called=True)
    agent = Agent(model=model, tools=[], callback_handler=None)
    t0 = time.perf_counter()
    try:
        result = run_bounded(agent.invoke_async(question), timeout)
    except Exception as exc:  # noqa: BLE001 - recorded, the board goes on
        s.seconds = round(time.perf_counter() - t0, 3)
        s.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        return s
    s.seconds = round(time.perf_counter() - t0, 3)
    s.answer = str(result).strip().splitlines()[0][:60] if str(result).strip() else ""
    s.output_tokens = (result.metrics.accumulated_usage or {}).get("outputTokens")
    if s.output_tokens and s.seconds:
        s.wall_tok_s = round(s.output_tokens / s.seconds, 1)
    return s


def run_scoreboard(endpoints: list[Endpoint], *, orchestrator: Any,
                   model_factory: Callable[[Endpoint], Any], timeout: float = 120.0,
                   question: str = QUESTION, retry_attempts: int = 6,
                   retry_initial_delay: float = 2.0) -> dict[str, Any]:
    """Run the orchestrating agent (``orchestrator``: a Strands model, Bedrock in a real run)."""
    from strands import Agent, ModelRetryStrategy, tool
    from strands.tools.executors import SequentialToolExecutor

    scores = {ep.name: Score(ep.name, ep.label or ep.name) for ep in endpoints}
    lock = threading.Lock()

    def make(ep: Endpoint):
        def ask_backend(question: str) -> dict:
            try:
                model = model_factory(ep)
            except Exception as exc:  # noqa: BLE001
                s = Score(ep.name, ep.label or ep.name, called=True, error=f"set-up: {exc}")
            else:
                s = ask(ep, model, question, timeout)
            with lock:
                scores[ep.name] = s
            return {"backend": ep.name, "answer": s.answer, "error": s.error}
        return tool(name=tool_name(ep.name),
                    description=f"Ask the {ep.label or ep.name} backend a short question.")(ask_backend)

    # Sequential: Strands runs a turn's tool calls concurrently by default, and backends asked
    # at the same time would share this process's CPU and skew each other's seconds.
    agent = Agent(model=orchestrator, tools=[make(ep) for ep in endpoints], system_prompt=SYSTEM_PROMPT,
                  callback_handler=None, tool_executor=SequentialToolExecutor(),
                  retry_strategy=ModelRetryStrategy(max_attempts=retry_attempts,
                                                    initial_delay=retry_initial_delay))
    error = None
    t0 = time.perf_counter()
    try:
        run_bounded(agent.invoke_async(f"Question for every backend: {question}"),
                    timeout * (len(endpoints) + 1))
    except Exception as exc:  # noqa: BLE001 - the board keeps what the tools measured
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    for s in scores.values():
        if not s.called:
            s.error = "not called by the orchestrating agent"
    # Measured rows by seconds, fastest first; failed or uncalled rows after them, by name.
    rows = sorted(scores.values(), key=lambda s: (s.error is not None,
                                                  s.seconds if s.error is None else 0.0, s.backend))
    return {"question": question, "orchestrator_error": error,
            "seconds": round(time.perf_counter() - t0, 3), "rows": [s.to_dict() for s in rows]}


def format_board(board: dict[str, Any]) -> str:
    lines = ["| backend | answer | seconds | tok/s (wall) |", "| --- | --- | --- | --- |"]
    for r in board["rows"]:
        answer = r["answer"] if r["error"] is None else f"error: {r['error']}"
        sec = f"{r['seconds']:.3f}" if r["seconds"] is not None and r["error"] is None else "—"
        toks = f"{r['wall_tok_s']:.1f}" if r["wall_tok_s"] is not None else "—"
        lines.append(f"| {r['label']} | {answer} | {sec} | {toks} |")
    if board.get("orchestrator_error"):
        lines.append(f"(orchestrating agent: {board['orchestrator_error']})")
    return "\n".join(lines)
