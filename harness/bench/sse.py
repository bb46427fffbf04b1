"""Incremental parser for OpenAI-compatible streaming responses (chat or completions).

Transport-independent: aiohttp (``backends.openai``), SageMaker payload parts
(``backends.sagemaker``) and Locust (``locustfile``) all feed it bytes with the time they
arrived. Lines may be split across feeds or several may come in one. Accepts ``data: {...}``
SSE lines and bare JSON lines (some SageMaker containers), ignores comments and other SSE
fields. A chunk counts as a token only if it carries text (content, reasoning, tool-call
arguments) or the server's usage says tokens were generated — a role-only first chunk never does.

Linear in the bytes received: a partial line is kept as a list of pieces and joined once, when
its newline arrives (re-joining it on every read made one 40 MB line cost ~10 s of CPU). A line
longer than ``MAX_LINE`` bytes fails the request as ``oversized`` and ``aborted`` tells the
client to stop reading. A non-streamed answer (``choices[0].message``: the server ignored
``stream: true``) is ``empty``. Usage counts go through ``Record.note_usage`` (``bad_usage``).
"""
from __future__ import annotations

try:  # orjson parses a chunk ~3x faster than json; fall back so a bare install still works
    from orjson import loads
except ImportError:  # pragma: no cover
    from json import loads

from harness.bench.record import Record

# The largest SSE line accepted. A streamed chunk is one decode step (well under a KiB, or a
# tool call's arguments); 16 MiB is far above any real one and bounds what a server can make
# the client hold and parse.
MAX_LINE = 16 * 1024 * 1024


class OpenAIStreamParser:
    __slots__ = ("rec", "pieces", "pending", "last_comp", "done", "finished", "aborted")

    def __init__(self, rec: Record) -> None:
        self.rec = rec
        self.pieces: list[bytes] = []  # the current line's bytes so far (no newline yet)
        self.pending = 0  # their total length
        self.last_comp = 0
        self.done = False  # saw data: [DONE]
        self.finished = False  # saw a finish_reason
        self.aborted = False  # a line passed MAX_LINE: the rest of the body is not read

    def feed(self, data: bytes, t_ns: int) -> None:
        if self.aborted:
            return
        nl = data.rfind(b"\n")
        if nl < 0:  # still inside one line: keep the piece, copy nothing
            self.pieces.append(data)
            self.pending += len(data)
            if self.pending > MAX_LINE:
                self._oversized(self.pending)
            return
        rest = data[nl + 1:]
        if self.pieces:
            self.pieces.append(data[:nl])
            data = b"".join(self.pieces)
        else:
            data = data[:nl]
        self.pieces = [rest] if rest else []
        self.pending = len(rest)
        line_ = self._line
        for line in data.split(b"\n"):
            if line and line != b"\r":  # blank lines separate events; skip the call
                if len(line) > MAX_LINE:
                    return self._oversized(len(line))
                line_(line, t_ns)

    def close(self, t_ns: int) -> None:
        """End of body: a last line without its newline still counts."""
        if self.aborted:
            return
        last = b"".join(self.pieces)
        self.pieces, self.pending = [], 0
        if last.strip():
            self._line(last, t_ns)

    def _oversized(self, size: int) -> None:
        self.aborted = True
        self.pieces, self.pending = [], 0
        self.rec.fail("oversized", f"one stream line of over {size} bytes (limit {MAX_LINE})")

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
            # the raw bytes, not str(obj): repr of a deeply nested error object recurses
            rec.fail("stream_error", payload[:300].decode("utf-8", "replace"))
            return
        comp = None
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                rec.fail("protocol", "usage is not a JSON object")
                return
            comp = rec.note_usage(usage.get("completion_tokens"), usage.get("prompt_tokens"))
        choices = obj.get("choices")
        if not choices:
            return  # usage-only trailer
        c = choices[0] if isinstance(choices, list) else None
        if not isinstance(c, dict):
            rec.fail("protocol", "choices is not a list of objects")
            return
        delta = c.get("delta")
        if delta is None and "message" in c:
            self.finished = True  # a whole answer: complete, but not a stream
            rec.fail("empty", "a non-streamed answer (choices[0].message): the server ignored "
                     "stream: true")
            return
        if not isinstance(delta, (dict, type(None))):
            rec.fail("protocol", "choices[0].delta is not a JSON object")
            return
        if delta is not None:
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            calls = delta.get("tool_calls")
            if not text and calls:
                try:
                    text = "".join((tc.get("function") or {}).get("arguments") or ""
                                   for tc in calls) or " "
                except (AttributeError, TypeError):
                    text = None
        else:
            text = c.get("text") or ""
        if not isinstance(text, str):
            rec.fail("protocol", "a chunk's text is not a string")
            return
        fr = c.get("finish_reason")
        if fr:
            self.finished = True
            rec.finish_reason = fr if isinstance(fr, str) else repr(fr)[:60]
        grew = comp is not None and comp > self.last_comp
        if grew:
            self.last_comp = comp
        if text or grew:
            rec.add_chunk(t_ns, text, comp)
