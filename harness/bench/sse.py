"""Incremental parser for OpenAI-compatible streaming responses (chat or completions).

Transport-independent: aiohttp (``backends.openai``), SageMaker payload parts
(``backends.sagemaker``) and Locust (``locustfile``) all feed it bytes with the time they
arrived. Lines may be split across feeds or several may come in one. Accepts ``data: {...}``
SSE lines and bare JSON lines (some SageMaker containers), ignores comments and other SSE
fields. A chunk counts as a token only if it carries text (content, reasoning, tool-call
arguments) or the server's usage says tokens were generated — a role-only first chunk never does.
"""
from __future__ import annotations

try:  # orjson parses a chunk ~3x faster than json; fall back so a bare install still works
    from orjson import loads
except ImportError:  # pragma: no cover
    from json import loads

from harness.bench.record import Record


class OpenAIStreamParser:
    __slots__ = ("rec", "buf", "last_comp", "done", "finished")

    def __init__(self, rec: Record) -> None:
        self.rec = rec
        self.buf = b""
        self.last_comp = 0
        self.done = False  # saw data: [DONE]
        self.finished = False  # saw a finish_reason

    def feed(self, data: bytes, t_ns: int) -> None:
        if self.buf:
            data = self.buf + data
        lines = data.split(b"\n")
        self.buf = lines.pop()
        line_ = self._line
        for line in lines:
            if line and line != b"\r":  # blank lines separate events; skip the call
                line_(line, t_ns)

    def close(self, t_ns: int) -> None:
        """End of body: a last line without its newline still counts."""
        if self.buf.strip():
            self._line(self.buf, t_ns)
        self.buf = b""

    def complete(self) -> bool:
        return self.done or self.finished

    def _line(self, line: bytes, t_ns: int) -> None:
        if line.startswith(b"data:"):
            payload = line[5:].strip()
        elif line[:1] == b"{":
            payload = line.strip()
        else:  # blank separator, ": comment", event:/id:/retry: fields
            return
        if payload == b"[DONE]":
            self.done = True
            return
        if not payload:
            return
        rec = self.rec
        try:
            obj = loads(payload)
        except ValueError:
            rec.fail("protocol", "unparseable chunk: " + payload[:120].decode("utf-8", "replace"))
            return
        if not isinstance(obj, dict):
            rec.fail("protocol", "chunk is not a JSON object")
            return
        if obj.get("error"):  # vLLM reports errors raised mid-generation inside the stream
            rec.fail("stream_error", str(obj["error"]))
            return
        comp = None
        usage = obj.get("usage")
        if usage:
            comp = usage.get("completion_tokens")
            if comp is not None:
                rec.usage_completion = comp
            if usage.get("prompt_tokens") is not None:
                rec.usage_prompt = usage["prompt_tokens"]
        choices = obj.get("choices")
        if not choices:
            return  # usage-only trailer
        c = choices[0]
        delta = c.get("delta")
        if delta is not None:
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            if not text and delta.get("tool_calls"):
                text = "".join((tc.get("function") or {}).get("arguments") or ""
                               for tc in delta["tool_calls"]) or " "
        else:
            text = c.get("text") or ""
        fr = c.get("finish_reason")
        if fr:
            self.finished = True
            rec.finish_reason = fr
        grew = comp is not None and comp > self.last_comp
        if grew:
            self.last_comp = comp
        if text or grew:
            rec.add_chunk(t_ns, text, comp)
