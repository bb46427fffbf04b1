"""Gemma 4 tool calls: the model's own call syntax to OpenAI ``tool_calls``, whole or streamed.

Gemma 4 does not emit JSON. A call is framed by two special tokens and uses its own value
syntax, with strings fenced by the ``<|"|>`` token and keys left bare::

    <|tool_call>call:count_ids{ids:[3,12,15],filter:<|"|>id >= 10<|"|>}<tool_call|>

Several calls are concatenated without a separator. Variants seen in the wild are accepted: a
stray colon after the start marker, JSON-quoted strings in place of the fence, and a call closed
by the end of the turn instead of its end marker. This is the format vLLM's ``gemma4`` tool parser reads and the format Gemma 4's chat template writes back for past calls (see README,
"Tool calling"). Streaming is exact: whatever way the text is cut into chunks (inside a marker,
inside a string fence, between a key and its colon) the events add up to the same result as
parsing the whole text at once; a test checks every split point.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

CALL_START = "<|tool_call>"
CALL_END = "<tool_call|>"
STR = '<|"|>'


class FormatError(ValueError):
    """Text inside a tool-call frame that is not Gemma 4 call syntax."""


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCall:
    index: int
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI clients expect


Event = ContentDelta | ToolCall


# ---------------------------------------------------------------------------------------------
# Value syntax: a small recursive-descent parser over one complete call body.
# ---------------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def peek(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise FormatError(f"expected {token!r} at offset {self.i} in {self.s!r}")
        self.i += len(token)

    def string(self) -> str:
        self.expect(STR)
        end = self.s.find(STR, self.i)
        if end < 0:
            raise FormatError(f"unterminated string in {self.s!r}")
        value, self.i = self.s[self.i:end], end + len(STR)
        return value

    def json_string(self) -> str:
        try:
            value, self.i = json.JSONDecoder().raw_decode(self.s, self.i)
        except json.JSONDecodeError:
            raise FormatError(f"bad JSON string at offset {self.i} in {self.s!r}") from None
        return value

    def bare(self, stops: str) -> str:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in stops:
            self.i += 1
        return self.s[start:self.i].strip()

    def value(self):
        self.skip_ws()
        if self.peek(STR):
            return self.string()
        if self.peek("{"):
            return self.mapping()
        if self.peek("["):
            return self.sequence()
        if self.peek('"'):  # a JSON-quoted string, which Gemma 4 sometimes writes instead of the fence
            return self.json_string()
        raw = self.bare(",}]")
        if not raw:
            raise FormatError(f"missing value at offset {self.i} in {self.s!r}")
        return _scalar(raw)

    def mapping(self) -> dict:
        self.expect("{")
        out: dict = {}
        self.skip_ws()
        if self.peek("}"):
            self.i += 1
            return out
        while True:
            self.skip_ws()
            key = (self.string() if self.peek(STR) else self.json_string() if self.peek('"')
                   else self.bare(":,}"))
            if not key:
                raise FormatError(f"missing key at offset {self.i} in {self.s!r}")
            self.skip_ws()
            self.expect(":")
            out[key] = self.value()
            self.skip_ws()
            if self.peek(","):
                self.i += 1
                continue
            self.expect("}")
            return out

    def sequence(self) -> list:
        self.expect("[")
        out: list = []
        self.skip_ws()
        if self.peek("]"):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            if self.peek(","):
                self.i += 1
                continue
            self.expect("]")
            return out


def _scalar(raw: str):
    if raw == "true":
        return True
    if raw == "false":
        return False
    if raw in ("null", "None"):
        return None
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw  # a bare word: keep it as a string rather than lose it


def parse_call(body: str) -> tuple[str, dict]:
    """``call:NAME{ARGS}`` (the text between the markers) -> (name, arguments)."""
    r = _Reader(body.strip())
    if r.peek(":call:"):  # a stray colon after the start marker, seen in Gemma 4 output
        r.i += 1
    r.expect("call:")
    name = r.bare("{").strip()
    if not name:
        raise FormatError(f"tool call without a name: {body!r}")
    args = r.mapping()
    r.skip_ws()
    if r.i != len(r.s):
        raise FormatError(f"trailing text after tool call arguments: {body!r}")
    return name, args


def format_value(value) -> str:
    """Python value -> Gemma 4 value syntax (the inverse of the parser; used by tests and the
    scripted generator to write calls exactly as the model does)."""
    if isinstance(value, str):
        return f"{STR}{value}{STR}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def format_call(name: str, arguments: dict) -> str:
    return f"{CALL_START}call:{name}{format_value(arguments)}{CALL_END}"


# ---------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------

def _held_prefix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that could be the start of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _find_end(body: str, start: int = 0) -> int:
    """Index of CALL_END in ``body`` outside string fences, or -1 if not (yet) there."""
    i, in_str = start, False
    while i < len(body):
        if body.startswith(STR, i):
            in_str, i = not in_str, i + len(STR)
        elif not in_str and body.startswith(CALL_END, i):
            return i
        else:
            i += 1
    return -1


class ToolCallStream:
    """Feed decoded text as it arrives; get content deltas and complete tool calls.

    A call is emitted whole (name and JSON arguments in one event) once its end marker arrives:
    Gemma's argument syntax is not JSON, so streaming half-converted arguments would only
    invite clients to parse fragments. Text that cannot be a call stays content.
    """

    def __init__(self, id_prefix: str = "call_") -> None:
        self._buf = ""
        self._in_call = False
        self._calls = 0
        self._id_prefix = id_prefix

    @property
    def calls(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Event]:
        self._buf += text
        events: list[Event] = []
        while True:
            if not self._in_call:
                at = self._buf.find(CALL_START)
                if at < 0:
                    keep = _held_prefix(self._buf, CALL_START)
                    out, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
                    if out:
                        events.append(ContentDelta(out))
                    return events
                if at:
                    events.append(ContentDelta(self._buf[:at]))
                self._buf, self._in_call = self._buf[at + len(CALL_START):], True
            end = _find_end(self._buf)
            if end < 0:
                return events
            body, self._buf, self._in_call = self._buf[:end], self._buf[end + len(CALL_END):], False
            events.append(self._call_or_text(body))

    def finish(self) -> list[Event]:
        """End of generation. A call the model ended with its end-of-turn token instead of the
        end marker (Gemma 4 does this) still counts if it is complete; anything else held back,
        an unfinished call included, is content."""
        body, in_call = self._buf, self._in_call
        self._buf, self._in_call = "", False
        if in_call:
            event = self._call_or_text(body)
            if isinstance(event, ToolCall):
                return [event]
            return [ContentDelta(CALL_START + body)]
        return [ContentDelta(body)] if body else []

    def _call_or_text(self, body: str) -> Event:
        try:
            name, args = parse_call(body)
        except FormatError:
            return ContentDelta(CALL_START + body + CALL_END)
        call = ToolCall(self._calls, self._id_prefix + secrets.token_hex(12), name,
                        json.dumps(args, ensure_ascii=False))
        self._calls += 1
        return call


def parse_all(text: str) -> tuple[str, list[ToolCall]]:
    """Whole output -> (content, tool calls). The non-streaming path uses the same machine."""
    stream = ToolCallStream()
    events = stream.feed(text) + stream.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, [e for e in events if isinstance(e, ToolCall)]
