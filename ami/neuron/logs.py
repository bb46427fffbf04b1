"""The engine's log: every line bounded in length, repeated lines rate-limited.

A hostile client must not be able to fill the disk through the log (one request echoed at
length, or one error repeated for every trickling connection). Each record's message is cut
to ``MAX_CHARS`` and its traceback to ``MAX_TRACE_LINES`` lines; a message template (logger +
format string) is written at most ``BURST`` times per ``WINDOW_S`` seconds, after which one line
says how many were suppressed.
"""
from __future__ import annotations

import logging
import sys
import time
import traceback

MAX_CHARS = 2000
MAX_TRACE_LINES = 40
BURST = 20
WINDOW_S = 60.0
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class RateLimit(logging.Filter):
    def __init__(self, burst: int = BURST, window_s: float = WINDOW_S, clock=time.monotonic) -> None:
        super().__init__()
        self.burst, self.window_s, self.clock = burst, window_s, clock
        self._seen: dict[tuple, list] = {}  # key -> [window start, count in window]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = self.clock()
        entry = self._seen.get(key)
        if entry is None or now - entry[0] >= self.window_s:
            dropped = entry[1] - self.burst - 1 if entry and entry[1] > self.burst + 1 else 0
            if len(self._seen) > 10_000:  # distinct templates are few; never grow without bound
                self._seen.clear()
            self._seen[key] = [now, 1]
            if dropped:
                record.msg = f"{record.msg} (and {dropped} similar lines suppressed in the last {self.window_s:.0f} s)"
            return True
        entry[1] += 1
        if entry[1] <= self.burst:
            return True
        if entry[1] == self.burst + 1:
            record.msg = (f"{record.msg} (repeated {self.burst} times; similar lines suppressed for "
                          f"up to {self.window_s:.0f} s)")
            record.exc_info, record.exc_text = None, None
            return True
        return False


class BoundedFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging.Formatter hook, named by the stdlib
        text = super().formatMessage(record)
        return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"... ({len(text)} characters)"

    def formatException(self, ei) -> str:  # noqa: N802 - logging.Formatter hook, named by the stdlib
        lines = [line[:MAX_CHARS] for line in "".join(traceback.format_exception(*ei)).splitlines()]
        if len(lines) > MAX_TRACE_LINES:
            keep = MAX_TRACE_LINES // 2
            lines = lines[:keep] + [f"... ({len(lines) - 2 * keep} lines)"] + lines[-keep:]
        return "\n".join(lines)


class ClientErrorsAreInfo(logging.Filter):
    """A request aiohttp's HTTP parser refuses (bad request line, header over 8190 bytes, bad
    Content-Length) is the client's error, not the server's: one INFO line, no traceback.
    aiohttp logs it with ``logger.exception("Error handling request from %s", ...)`` through the
    ``logger`` its RequestHandler is given (aiohttp 3.14 web_protocol.RequestHandler.handle_error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        code = getattr(exc, "code", 500)
        if exc is not None and type(exc).__module__ == "aiohttp.http_exceptions" and 400 <= code < 500:
            detail = " ".join(str(getattr(exc, "message", "") or exc).split())[:200]
            record.msg = f"{record.msg}: HTTP {code} {type(exc).__name__}: {detail}"
            if record.levelno > logging.INFO:
                record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


HTTP_LOG = logging.getLogger("ami.neuron.http")  # the logger aiohttp's RequestHandler writes to
HTTP_LOG.addFilter(ClientErrorsAreInfo())


def handler(stream=None) -> logging.Handler:
    h = logging.StreamHandler(stream if stream is not None else sys.stderr)
    h.setFormatter(BoundedFormatter(FORMAT))
    h.addFilter(RateLimit())
    return h


def setup(level: str) -> None:
    """The root logger writes through one bounded, rate-limited handler."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler())
    root.setLevel(level.upper())
