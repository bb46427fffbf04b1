"""Scripts for the accuracy tests, played by the tests' one fake OpenAI server (tests/fakes/openai.py).

A ``Script`` here maps the user message of a chat request to the reply text (or an HTTP status);
``ScriptedServer`` is that server started with such a script: it records every request body in
order (``bodies``), can stop answering after ``die_after`` replies (it stops listening and every
later connection is refused), and optionally serves ``/v1/completions`` with echo (prompt
logprobs) for log-likelihood tasks.
"""
from __future__ import annotations

import re
from typing import Callable

from tests.fakes.openai import WORDS, FakeOpenAI  # noqa: F401 - WORDS: the tests split prompts with it

Script = Callable[[str], "str | int"]  # reply text, or an HTTP error status to answer with


def numbered(right: set[int], *, style: str = "line") -> Script:
    """Questions 'Q<i>: what is <i> plus <i>?' (answer 2i): right for i in ``right``, else 2i+1."""

    def reply(text: str) -> str:
        m = re.search(r"Q(\d+):", text)
        if m is None:  # not an item (lm-eval's one-token probe of the chat endpoint)
            return "OK"
        i = int(m.group(1))
        ans = 2 * i if i in right else 2 * i + 1
        if style == "line":
            return f"Adding {i} and {i} step by step.\nAnswer: {ans}"
        return f"So {i} + {i} gives {ans:,}."  # no Answer line: the last number is taken

    return reply


class ScriptedServer(FakeOpenAI):
    """The fake server answering whole (non-streamed) chat replies from a text script, started."""

    def __init__(self, script: Script, *, model: str = "scripted-model", die_after: int | None = None,
                 echo_logprobs: "bool | Callable[[list[str]], float]" = False,
                 refuse: tuple[str, ...] = ()) -> None:
        def by_body(body: dict, _n: int) -> dict:
            user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
            if isinstance(user, list):
                user = " ".join(p.get("text", "") for p in user)
            out = script(user)
            return {"status": out} if isinstance(out, int) else {"text": out}

        super().__init__(by_body, model, die_after=die_after, echo_logprobs=echo_logprobs, refuse=refuse,
                         prompt_tokens=1)
        self.start()

    def questions(self) -> list[str]:
        """The item questions asked, in order (other chat requests, such as probes, left out)."""
        out = []
        for b in self.bodies:
            if "messages" in b:
                q = [m for m in b["messages"] if m["role"] == "user"][-1]["content"]
                if isinstance(q, str) and re.match(r"Q\d+:", q):
                    out.append(q)
        return out
