"""Gemma 4 thought channel: ``<|channel>thought\\n…<channel|>`` kept out of the answer.

Gemma 4 writes its reasoning, when it reasons, inside a channel block before the answer. The
engine returns it as ``reasoning_content`` (vLLM's field name) instead of mixing it into
``content``, so a client quoting the answer never quotes the thinking. Like the tool-call
parser it is exact under any chunking: a marker cut across chunks is held back, never leaked.
"""
from __future__ import annotations

from .toolcalls import _held_prefix

OPEN = "<|channel>"
CLOSE = "<channel|>"
LABEL = "thought\n"  # the channel's name line, not part of the reasoning itself


class ThoughtStream:
    """feed(text) -> (content, reasoning); finish() flushes what was held back."""

    def __init__(self) -> None:
        self._buf = ""
        self._inside = False
        self._label_pending = False

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        content, reasoning = [], []
        while True:
            if not self._inside:
                at = self._buf.find(OPEN)
                if at < 0:
                    keep = _held_prefix(self._buf, OPEN)
                    content.append(self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    break
                content.append(self._buf[:at])
                self._buf, self._inside, self._label_pending = self._buf[at + len(OPEN):], True, True
            if self._label_pending:
                if len(self._buf) < len(LABEL) and LABEL.startswith(self._buf) and CLOSE not in self._buf:
                    break  # the label may still be arriving
                if self._buf.startswith(LABEL):
                    self._buf = self._buf[len(LABEL):]
                self._label_pending = False
            end = self._buf.find(CLOSE)
            if end < 0:
                keep = _held_prefix(self._buf, CLOSE)
                reasoning.append(self._buf[:len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep:]
                break
            reasoning.append(self._buf[:end])
            self._buf, self._inside = self._buf[end + len(CLOSE):], False
        return "".join(content), "".join(reasoning)

    def finish(self) -> tuple[str, str]:
        rest, inside = self._buf, self._inside
        self._buf, self._inside, self._label_pending = "", False, False
        return ("", rest) if inside else (rest, "")
