"""Scripted models for the agent-trial tests, played by the tests' one fake OpenAI server
(tests/fakes/openai.py, re-exported here as ``FakeOpenAI``).

Each script decides, from the request body, whether to answer with a tool call or with text.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from tests.fakes.openai import FakeOpenAI, Reply  # noqa: F401 - the server these scripts run on


def _tool_result(body: dict[str, Any]) -> str | None:
    for m in body.get("messages", []):
        if m.get("role") == "tool":
            c = m.get("content")
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            return str(c)
    return None


def tool_then_quote(arguments: str) -> Callable[[dict, int], Reply]:
    """Call count_ids with ``arguments`` (raw JSON text), then quote the count it returned."""

    def script(body: dict, _n: int) -> Reply:
        result = _tool_result(body)
        if result is None:
            return {"tool": "count_ids", "arguments": arguments}
        try:
            count = json.loads(result)["count"]
        except (ValueError, KeyError, TypeError):
            count = 8  # the tool failed: a plausible guess, which must not pass
        return {"text": f"I counted {count} records with the filter.\nAnswer: {count}"}

    return script


def text_only(text: str) -> Callable[[dict, int], Reply]:
    return lambda body, n: {"text": text}


def throttle_first(inner: Callable[[dict, int], Reply], times: int = 1) -> Callable[[dict, int], Reply]:
    return lambda body, n: {"status": 429} if n < times else inner(body, n)


SCRIPTS: dict[str, Callable[[dict, int], Reply]] = {
    "good": tool_then_quote(json.dumps({"filters": ["id >= 10"]})),
    "wrong-filter": tool_then_quote(json.dumps({"filters": ["id > 10"]})),
    "no-tool": text_only("There are 8 such records.\nAnswer: 8"),
    "malformed": tool_then_quote('{"filters": ["id >= 10"'),
    "plain": text_only("Counting the ids 11, 12, 15, 18, 21, 24, 27 and 30.\nAnswer: 8"),
}
