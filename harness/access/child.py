"""The forwarder process's side (``python -m harness.access.child``, started by
``harness.access.process.ProcessForward``; the protocol and the reasons are described there).

Every TCP hop has Nagle off: the local connections and the SSH carrier here (``_nodelay`` in
``harness.access.tunnel``), the load generator's own sockets (asyncio sets TCP_NODELAY on every TCP
transport: CPython Lib/asyncio/selector_events.py, ``_SelectorSocketTransport.__init__``), and
sshd's side once the pty session runs (``tunnel._mark_interactive``). Buffers: a channel's
window is paramiko's 2 MiB with 32 KiB packets (paramiko/common.py DEFAULT_WINDOW_SIZE,
DEFAULT_MAX_PACKET_SIZE), far above what a token stream has in flight, so no stream ever waits
for a window adjust; streamed bytes are written to the local socket as each SSH packet arrives.
"""
from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import logging
import queue
import signal
import socket
import sys
import threading
from typing import Any, Callable

import paramiko

from harness.access import tunnel
from harness.access.hostkeys import AccessError


def key_from_pem(pem: str) -> paramiko.PKey:
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        with contextlib.suppress(paramiko.SSHException, ValueError):
            return cls(file_obj=io.StringIO(pem))
    raise AccessError("tunnel ticket: unreadable private key")


class _Pins(tunnel.HostKeyPins):
    """The run's pin for this instance, and a report to the parent of every key seen."""

    def __init__(self, host: str, pin: list[str] | None, report: Callable[[dict], None]) -> None:
        super().__init__()
        if pin:
            self._pins[host] = (pin[0], pin[1])
        self._report = report

    def check(self, host: str, key: paramiko.PKey) -> None:
        self._report({"op": "pin", "name": key.get_name(), "blob": key.get_base64()})
        super().check(host, key)


# AES-GCM first: one AEAD call per packet instead of AES-CTR plus a separate HMAC (paramiko
# lists aes128-gcm@openssh.com among its ciphers, after the CTR ones: paramiko/transport.py
# _preferred_ciphers; OpenSSH's sshd offers it by default: sshd_config(5) Ciphers).
_GCM_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def _direct_feed(chan: paramiko.Channel, m: paramiko.Message) -> None:
    """MSG_CHANNEL_DATA handler in the transport thread: the bytes go straight to the local
    connection (one send) instead of through the channel's buffer, its pipe and the relay
    thread (three more syscalls and a thread hand-off per streamed chunk). Falls back to the
    buffer when the channel has no direct connection yet or still holds buffered bytes. Bytes
    can reach the buffer only before ``_attach``, i.e. from a server that speaks first; an HTTP
    server answers only after the request, which the relay sends after ``_attach``, so the two
    paths never both carry bytes of one connection."""
    conn = getattr(chan, "kit_conn", None)
    if conn is None or len(chan.in_buffer):
        paramiko.Channel._feed(chan, m)
        return
    data = m.get_binary()
    try:
        conn.sendall(data)
    except OSError:  # the local client went away: the relay sees its socket shut and drops both
        chan.kit_conn = None
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        return
    ack = chan._check_add_window(len(data))
    if ack > 0:  # a window adjust: sent from another thread (never block the transport thread)
        chan.kit_acks.put((chan, ack))


class _ChildForward(tunnel.SshForward):
    """SshForward that tells the parent about redials, aborts on a changed host key and, with
    ``fast=True``, prefers AES-GCM and writes streamed bytes from the transport thread."""

    def __init__(self, *args: Any, report: Callable[[dict], None], abort: Callable[[], None],
                 fast: bool = True, **kwargs: Any) -> None:
        self._report, self._abort, self._reported = report, abort, 0
        self._fast = fast
        self._acks: queue.SimpleQueue = queue.SimpleQueue()
        if fast:
            threading.Thread(target=self._ack_loop, daemon=True, name="window-acks").start()
        super().__init__(*args, **kwargs)

    def _tune(self, transport: paramiko.Transport) -> None:
        if not self._fast:
            return
        opts = transport.get_security_options()
        opts.ciphers = tuple(c for c in _GCM_FIRST if c in opts.ciphers) + \
            tuple(c for c in opts.ciphers if c not in _GCM_FIRST)
        table = dict(type(transport)._channel_handler_table)
        table[paramiko.common.MSG_CHANNEL_DATA] = _direct_feed
        transport._channel_handler_table = table

    def _attach(self, conn: socket.socket, chan: paramiko.Channel) -> None:
        super()._attach(conn, chan)  # upstream bytes, EOF and close stay with the relay
        if self._fast:
            chan.kit_acks = self._acks
            chan.kit_conn = conn

    def _ack_loop(self) -> None:
        while True:
            chan, ack = self._acks.get()
            if chan is None:
                return
            m = paramiko.Message()
            m.add_byte(paramiko.common.cMSG_CHANNEL_WINDOW_ADJUST)
            m.add_int(chan.remote_chanid)
            m.add_int(ack)
            with contextlib.suppress(Exception):  # a closed transport: nothing to adjust
                chan.transport._send_user_message(m)

    def close(self) -> None:
        self._acks.put((None, 0))
        super().close()

    def _live_transport(self) -> paramiko.Transport:
        try:
            t = super()._live_transport()
        except tunnel.HostKeyMismatch as exc:
            self._report({"op": "fatal", "type": "HostKeyMismatch", "error": str(exc)})
            self._abort()
            raise
        if self.reconnects != self._reported:
            self._reported = self.reconnects
            self._report({"op": "reconnected", "n": self.reconnects})
        return t


def _tcp_carrier(addr: list, timeout: float) -> socket.socket:
    sock = socket.create_connection((addr[0], int(addr[1])), timeout=timeout)
    sock.settimeout(None)
    return sock


def child_main() -> int:
    # Ctrl-C reaches the whole process group; the parent closes this process in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="tunnel: %(message)s")
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    wlock = threading.Lock()

    def report(msg: dict) -> None:
        with wlock, contextlib.suppress(OSError, ValueError):
            out.write((json.dumps(msg) + "\n").encode())
            out.flush()

    first = inp.readline()
    if not first:
        return 0
    start = json.loads(first)
    if start.get("pty_session") is False:  # the tunnel measurement's --no-pty-session
        tunnel._mark_interactive = lambda transport, host_id: None
    if start.get("switch_interval"):
        sys.setswitchinterval(float(start["switch_interval"]))
    closing = threading.Event()
    waiting: dict[int, queue.SimpleQueue] = {}
    ids = itertools.count(1)
    live: dict[str, Any] = {}  # "fwd" once the forwarder is up
    cancels: dict[int, threading.Event] = {}

    def execute(msg: dict) -> None:
        n, cancel = msg["id"], threading.Event()
        cancels[n] = cancel
        try:
            status, out = live["fwd"].run_remote(
                msg["cmd"], base64.b64decode(msg.get("stdin") or ""), cancel=cancel,
                keep_stdin_open=bool(msg.get("keep_stdin_open")),
                on_stderr=lambda d: report({"op": "exec-err", "id": n, "data": base64.b64encode(d).decode()}))
            report({"op": "exec-done", "id": n, "status": status, "stdout": base64.b64encode(out).decode()})
        except Exception as exc:  # noqa: BLE001 - the parent raises it as RemoteError
            report({"op": "exec-done", "id": n, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            cancels.pop(n, None)

    def read_parent() -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in inp:
                msg = json.loads(raw)
                op = msg.get("op")
                if op == "ticket" and msg.get("id") in waiting:
                    waiting.pop(msg["id"]).put(msg)
                elif op == "exec":
                    if "fwd" not in live:
                        report({"op": "exec-done", "id": msg["id"], "error": "the tunnel is not up"})
                        continue
                    threading.Thread(target=execute, args=(msg,), daemon=True).start()
                elif op == "exec-cancel" and msg.get("id") in cancels:
                    cancels[msg["id"]].set()
                elif op == "close":
                    break
        closing.set()  # close asked, or EOF: the parent is gone
        for q in list(waiting.values()):
            q.put({"error": "closing"})

    threading.Thread(target=read_parent, daemon=True, name="parent-reader").start()
    timeout = float(start.get("timeout") or 20.0)
    host_id = start["host_id"]

    def dial() -> tuple[Any, paramiko.PKey, Callable[[], None]]:
        n = next(ids)
        q: queue.SimpleQueue = queue.SimpleQueue()
        waiting[n] = q
        report({"op": "ticket?", "id": n})
        try:
            msg = q.get(timeout=3 * timeout + 30)
        except queue.Empty:
            raise tunnel.AccessError(f"{host_id}: no dial ticket from the parent") from None
        if "error" in msg:
            raise tunnel.AccessError(msg["error"])
        key = key_from_pem(msg["key"])
        if "ws" in msg:
            bridge = tunnel.WebsocketBridge(msg["ws"])
            return bridge.sock, key, bridge.close
        sock = _tcp_carrier(msg["tcp"], timeout)
        return sock, key, sock.close

    try:
        fwd = _ChildForward(dial, username=start["username"], remote_port=int(start["remote_port"]),
                            host_id=host_id, pins=_Pins(host_id, start.get("pin"), report),
                            remote_host=start.get("remote_host") or "127.0.0.1", timeout=timeout,
                            keepalive=int(start.get("keepalive") or 30), report=report,
                            fast=start.get("fast", True) is not False,
                            abort=closing.set)
    except tunnel.AccessError as exc:
        report({"op": "fatal", "type": type(exc).__name__, "error": str(exc)})
        return 1
    live["fwd"] = fwd
    with fwd:
        report({"op": "ready", "port": fwd.local_port})
        closing.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main())
