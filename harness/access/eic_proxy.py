"""OpenSSH ``ProxyCommand`` for the EC2 Instance Connect endpoint: the SSH bytes on this
process's stdin/stdout travel as binary frames over the presigned ``openTunnel`` websocket.

    ssh -o ProxyCommand="python -m harness.access.eic_proxy TICKET_FILE" ...

(``harness.access.openssh`` writes that command.) TICKET_FILE holds the presigned URL; it is
read and deleted at once, so the URL (a credential for 60 s) is never in an argv, an environment
or a log (error texts that quote it, as websockets' InvalidURI does, are redacted). The process
only copies ciphertext: no key, no decryption. Any failure is one line on stderr (ssh prints it)
and exit status 1.

Frames as the AWS CLI sends them (awscli/customizations/ec2instanceconnect/websocket.py,
``Websocket``): binary only, at most ``FRAME_BYTES`` each; a text frame from EIC is an error, as
is a close code other than 1000 (websockets raises ConnectionClosedError, whose text names the
code and reason EIC gave, e.g. at the tunnel's maxTunnelDuration).
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

# awscli's Websocket._MAX_BYTES_PER_FRAME: the largest frame the CLI sends EIC, so the largest
# one known to pass. A pipe read can return 64 KiB or more, hence the cap on each read.
FRAME_BYTES = 65_000


def redact(text: str, url: str) -> str:
    """``text`` without the presigned URL or its query string (the signature, the key id)."""
    for secret in (url, url.partition("?")[2]):
        if secret:
            text = text.replace(secret, "<presigned URL>")
    return text


def _read_ticket(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            url = f.read().strip()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if not url.startswith(("wss://", "ws://")):
        raise ValueError("the ticket file does not hold a websocket URL")
    return url


def relay(url: str, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    from websockets.sync.client import connect

    # As harness.access.tunnel.WebsocketBridge: no pings (SSH keepalives keep EIC busy), no compression
    # (the bytes are encrypted), no frame cap; Nagle off on the socket under the TLS.
    ws = connect(url, open_timeout=15, ping_interval=None, compression=None, max_size=None,
                 user_agent_header="inference-kit")
    with contextlib.suppress(OSError):
        ws.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    errors: list[str] = []

    def down() -> None:  # websocket -> ssh
        try:
            for message in ws:
                if isinstance(message, str):  # EIC sends only binary frames; text is an error
                    errors.append(f"unexpected text frame: {message[:200]}")
                    break
                view = memoryview(message)
                while view:
                    view = view[os.write(stdout_fd, view):]
        except Exception as exc:  # noqa: BLE001 - e.g. EIC closing at its tunnel time limit
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(OSError):
                os.close(stdout_fd)  # ssh sees EOF

    t = threading.Thread(target=down, daemon=True)
    t.start()
    try:
        while data := os.read(stdin_fd, FRAME_BYTES):  # ssh -> websocket, one frame per read
            ws.send(data)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            ws.close()
    t.join(5)
    real = [e for e in errors if "ConnectionClosedOK" not in e]
    if real:
        print(f"eic_proxy: {redact(real[0], url)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.access.eic_proxy TICKET_FILE", file=sys.stderr)
        return 2
    url = ""
    try:
        url = _read_ticket(args[0])
        return relay(url)
    except Exception as exc:  # noqa: BLE001 - one line for ssh to show
        print(f"eic_proxy: could not open the EIC websocket: {type(exc).__name__}: "
              f"{redact(str(exc), url)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
