"""One HTTP request with a total deadline, not a per-read timeout.

``urllib.request.urlopen(timeout=T)`` bounds each socket operation by T: a server that sends one
byte every 2 s never trips it and holds the caller forever. Here a timer
shuts the request's socket down when the deadline passes, wherever the request is blocked
(connect, headers, body), so the call returns within the deadline plus a moment; the reply body
is read with a size cap. Proxies from the environment are honoured as urllib does (the handlers
below only replace the connection class, to learn its socket).

    status, body = fetch(url, deadline_s=300, data=b"{...}", headers={...})

Raises ``Deadline`` (a TimeoutError) when the deadline passed, ``TooLarge`` when the body is over
``cap``, ``urllib.error.URLError`` / ``OSError`` when the server cannot be reached. An HTTP error
status is returned, not raised, with its body (capped too).
"""
from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.request

MAX_REPLY_BYTES = 32 * 1024 * 1024  # a chat completion is kilobytes; an endless body stops here


class Deadline(TimeoutError):
    """The request did not complete within its deadline."""


class TooLarge(ValueError):
    """The reply body is larger than the cap."""


class _Watch:
    """The socket of one request, and whether its deadline passed (then it is shut down)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.expired = False

    def attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.sock = sock
            expired = self.expired
        if expired:
            self._shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            sock = self.sock
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:  # shutdown, not close: a read blocked in another thread returns at once
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Conn(http.client.HTTPConnection):
    def __init__(self, *a, watch: _Watch, **kw) -> None:
        super().__init__(*a, **kw)
        self._watch = watch

    def connect(self) -> None:
        super().connect()
        self._watch.attach(self.sock)


class _ConnTLS(http.client.HTTPSConnection):
    def __init__(self, *a, watch: _Watch, **kw) -> None:
        super().__init__(*a, **kw)
        self._watch = watch

    def connect(self) -> None:
        super().connect()  # TCP, then the TLS handshake; the raw socket is bounded by its timeout
        self._watch.attach(self.sock)


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self.watch = watch

    def http_open(self, req):
        return self.do_open(functools.partial(_Conn, watch=self.watch), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch, context: ssl.SSLContext | None = None) -> None:
        super().__init__(context=context)
        self.watch = watch

    def https_open(self, req):
        return self.do_open(functools.partial(_ConnTLS, watch=self.watch), req, context=self._context)


def fetch(url: str, *, deadline_s: float, data: bytes | None = None, headers: dict[str, str] | None = None,
          method: str | None = None, cap: int = MAX_REPLY_BYTES) -> tuple[int, bytes]:
    """(HTTP status, body) of one request, all of it within ``deadline_s`` seconds from now."""
    watch = _Watch()
    opener = urllib.request.build_opener(_HTTP(watch), _HTTPS(watch))
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    timer = threading.Timer(deadline_s, watch.expire)
    timer.daemon = True
    timer.start()
    try:
        try:
            # the per-operation timeout bounds connect (the socket is not known until connected)
            with opener.open(req, timeout=deadline_s) as r:
                status, body = r.status, r.read(cap + 1)
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read(cap + 1)
    except (OSError, http.client.HTTPException) as e:
        if watch.expired or isinstance(getattr(e, "reason", e), (TimeoutError, socket.timeout)):
            raise Deadline(f"no complete reply within {deadline_s:g} s") from None
        if isinstance(e, http.client.HTTPException):  # e.g. a reply cut short
            raise urllib.error.URLError(f"{type(e).__name__}: {e}") from None
        raise
    finally:
        timer.cancel()
    if watch.expired:  # the deadline passed as the last bytes came: not a complete reply
        raise Deadline(f"no complete reply within {deadline_s:g} s")
    if len(body) > cap:
        raise TooLarge(f"reply larger than {cap // (1024 * 1024)} MiB")
    return status, body
