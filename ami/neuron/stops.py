"""Stop strings, matched on the generated text as vLLM matches them.

vLLM checks its stop strings on the detokenized output after every token
(``vllm/v1/engine/detokenizer.py`` ``BaseIncrementalDetokenizer.update`` / ``check_stop_strings``):
a match may span token boundaries; the output is cut before the stop string, or after it with
``include_stop_str_in_output``; the request finishes with ``finish_reason`` "stop" (and
``stop_reason`` the string). While streaming it holds back ``max(len(s) for s in stop) - 1``
characters (``stop_buffer_length``) unless the stop strings are kept in the output, so a client
never receives the start of a stop string that then matches.
"""
from __future__ import annotations


class StopMatcher:
    """Feed text pieces as they are decoded; each ``feed`` returns the text that can be sent now.
    After a match ``stopped`` is the stop string and nothing more is taken."""

    def __init__(self, stops: tuple[str, ...], include: bool = False) -> None:
        self.stops, self.include = tuple(stops), include
        self.reach = max((len(s) for s in stops), default=1) - 1  # earlier text a match can start in
        self.seen = ""  # the last ``reach`` characters before the current piece
        self.pending = ""  # held back, not yet sent (without include: always the end of ``seen``)
        self.stopped: str | None = None

    def feed(self, piece: str) -> str:
        if self.stopped is not None or not piece:
            return ""
        if not self.stops:
            return piece
        window = self.seen + piece
        best = None
        for s in self.stops:
            # A new match ends inside this piece: it starts at most len(s) - 1 characters before
            # it. The first stop string in the request's order that matches wins, as in vLLM's
            # check_stop_strings (vllm/v1/engine/detokenizer.py).
            at = window.find(s, max(0, len(self.seen) - len(s) + 1))
            if at != -1:
                best = (at, s)
                break
        if best is not None:
            at, s = best
            self.stopped = s
            if self.include:  # everything before the piece was sent already
                out = window[len(self.seen): at + len(s)]
            else:  # ``seen`` ends with ``pending``; what precedes it was sent
                out = window[len(self.seen) - len(self.pending): at]
            self.pending = self.seen = ""
            return out
        self.seen = window[max(0, len(window) - self.reach):] if self.reach else ""
        if self.include:
            return piece
        text = self.pending + piece
        cut = max(0, len(text) - self.reach)
        self.pending = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        """At the end of the sequence: what was held back (no stop string completed)."""
        out, self.pending = ("" if self.stopped is not None else self.pending), ""
        return out
