"""Loopback servers for the access tests: a real OpenSSH sshd (``harness.calibration.loopback_sshd``,
shared with the tunnel measurement), a tiny HTTP server, and a fake EIC endpoint (a websocket
server that bridges /openTunnel to the sshd, as EIC bridges to port 22)."""
from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import urllib.request
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

from harness.calibration.loopback_sshd import free_port, sshd  # noqa: F401  (re-exported for the tests)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f'{{"path": "{self.path}"}}'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def http_server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


@contextlib.contextmanager
def fake_eic(target_port: int) -> Iterator[dict[str, Any]]:
    """A websocket server that, like EIC, checks the openTunnel query and pipes binary frames to
    a TCP port. Records each request's query parameters."""
    from websockets.sync.server import serve

    seen: list[dict[str, list[str]]] = []

    def handler(ws: Any) -> None:
        q = parse_qs(urlparse(ws.request.path).query)
        seen.append(q)
        if urlparse(ws.request.path).path != "/openTunnel" or "X-Amz-Signature" not in q:
            ws.close(1008, "not a presigned openTunnel request")
            return
        with socket.create_connection(("127.0.0.1", target_port)) as tcp:
            def down() -> None:
                with contextlib.suppress(Exception):
                    while data := tcp.recv(65536):
                        ws.send(data)
                with contextlib.suppress(Exception):
                    ws.close()
            t = threading.Thread(target=down, daemon=True)
            t.start()
            with contextlib.suppress(Exception):
                for msg in ws:
                    tcp.sendall(msg if isinstance(msg, bytes) else msg.encode())
            with contextlib.suppress(OSError):
                tcp.shutdown(socket.SHUT_RDWR)
            t.join(5)

    server = serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None, max_size=None)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield {"port": server.socket.getsockname()[1], "seen": seen}
    finally:
        server.shutdown()
        t.join(5)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())
