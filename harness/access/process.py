"""The SSH forwarder in a process of its own, so that it never competes with the load generator.

In the load generator's process, paramiko's transport thread (packet framing, AES, MAC), the
relay thread and the websocket bridge threads all take the GIL that the benchmark's event loop
needs to timestamp chunks; at 64 streams this cost ~15 % of output tok/s and coalesced chunks.
``ProcessForward`` runs the same ``harness.access.tunnel.SshForward`` in a child
(``python -m harness.access.child``), which has its own GIL and core.

Parent and child speak JSON lines over the child's stdin/stdout:

    parent -> child  {"op": "start", username, remote_host, remote_port, host_id, pin, ...}
    child  -> parent {"op": "ticket?", "id": n}            at every (re)dial
    parent -> child  {"op": "ticket", "id": n, "key": PEM, "tcp": [host, port] | "ws": URL}
    child  -> parent {"op": "pin", ...} {"op": "ready", "port": N} {"op": "reconnected", "n": k}
                     {"op": "fatal", "type": ..., "error": ...}
    parent -> child  {"op": "exec", "id": n, "cmd": ..., "stdin": b64}   a command on the far side
    child  -> parent {"op": "exec-err", "id": n, "data": b64}           its stderr, as it comes
                     {"op": "exec-done", "id": n, "status": k, "stdout": b64 | "error": ...}
    parent -> child  {"op": "exec-cancel", "id": n}
    parent -> child  {"op": "close"}                        (or EOF: the parent is gone)

Credentials: the child never holds AWS credentials. Each (re)dial, including the redial after
EIC's 3600 s tunnel cap, asks the parent for a *ticket*: the parent pushes a fresh ephemeral key
with ``send_ssh_public_key`` and presigns the ``openTunnel`` URL (60 s expiry) with its own
botocore session, whose refreshable credentials (SSO, assume-role, instance profile) botocore
renews itself. Only the presigned URL and the ephemeral private key (valid 60 s on the instance)
cross the pipe; nothing goes through argv or the environment (``AWS_*`` variables are removed
from the child's environment) and neither is ever logged.

Host keys: the child starts with the run's pin for the instance (if any) and reports the key it
sees; a different key on a redial makes the child report ``fatal`` and close its listener and
transport, so every later connection is refused: the tunnel aborts. The parent keeps the error
in ``ProcessForward.error`` and logs it.

No process is left behind: the parent closes the child on ``close()``/context exit (also on
Ctrl-C: the child ignores SIGINT and is closed by its parent), and the child exits by itself
when its stdin reaches EOF, which happens when the parent dies for any reason.
"""
from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import paramiko

from harness.access.hostkeys import AccessError, HostKeyMismatch, HostKeyPins
from harness.access.remote_exec import RemoteError

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the harness package

# What the parent hands the child at each (re)dial: {"key": PKey, "tcp": (host, port)} or
# {"key": PKey, "ws": presigned wss URL}.
TicketFn = Callable[[], dict]


# --------------------------------------------------------------------------- key (de)serialization
def key_to_pem(key: paramiko.PKey) -> str:
    """OpenSSH PEM of a private key (paramiko cannot write ed25519 private keys itself)."""
    if isinstance(key, paramiko.Ed25519Key):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        seed = bytes(key._signing_key)  # PyNaCl SigningKey: bytes() is the 32-byte seed
        return Ed25519PrivateKey.from_private_bytes(seed).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption()).decode()
    buf = io.StringIO()
    key.write_private_key(buf)
    return buf.getvalue()


def child_env() -> dict[str, str]:
    """The parent's environment without AWS credentials or settings (the child needs none)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


# --------------------------------------------------------------------------- parent side
class ProcessForward:
    """``harness.access.tunnel.SshForward`` in a child process (``harness.access.child``), with the
    attributes that matter to a caller:
    ``base_url``, ``local_port``, ``remote``, ``reconnects``, ``close()``, context manager.

    ``ticket()`` runs in this process at every dial of the child and returns the key and what
    to dial (see ``TicketFn``). ``switch_interval``, ``pty_session=False`` and ``fast=False``
    (no AES-GCM preference, no direct write from the transport thread: ``harness.access.child``)
    are for the tunnel measurement (``harness.calibration.tunnel``) only. Errors opening the tunnel raise ``AccessError`` (or
    ``HostKeyMismatch``) here, as the in-process forwarder does.
    """

    def __init__(self, ticket: TicketFn, *, username: str, remote_port: int, host_id: str,
                 pins: HostKeyPins, remote_host: str = "127.0.0.1", timeout: float = 20.0,
                 keepalive: int = 30, switch_interval: float | None = None,
                 pty_session: bool = True, fast: bool = True) -> None:
        self.remote = (remote_host, remote_port)
        self.reconnects = 0
        self.error: str | None = None
        self.local_port = 0
        self._ticket, self._host_id, self._pins = ticket, host_id, pins
        self._ready = threading.Event()
        self._fatal: dict | None = None
        self._closing = False
        self._wlock = threading.Lock()
        self._ids = itertools.count(1)
        self._execs: dict[int, tuple[queue.SimpleQueue, Callable[[bytes], None] | None]] = {}
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.access.child"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=str(_ROOT), env=child_env())
        self._reader = threading.Thread(target=self._read, daemon=True, name="tunnel-proc-reader")
        self._reader.start()
        try:
            self._send({"op": "start", "username": username, "remote_host": remote_host,
                        "remote_port": remote_port, "host_id": host_id,
                        "pin": list(pins.get(host_id) or []) or None, "timeout": timeout,
                        "keepalive": keepalive, "switch_interval": switch_interval,
                        "pty_session": pty_session, "fast": fast})
            if not self._ready.wait(3 * timeout + 30):
                raise AccessError(f"SSH to {host_id} failed: the tunnel process did not "
                                         f"start within {3 * timeout + 30:g} s")
            if self._fatal is not None:
                exc = HostKeyMismatch if self._fatal.get("type") == "HostKeyMismatch" \
                    else AccessError
                raise exc(self._fatal["error"])
            if not self.local_port:
                raise AccessError(f"SSH to {host_id} failed: the tunnel process exited "
                                         f"(status {self.proc.poll()})")
        except BaseException:
            self.close()
            raise

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}/v1"

    def _send(self, msg: dict) -> None:
        line = (json.dumps(msg) + "\n").encode()
        with self._wlock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line)
            self.proc.stdin.flush()

    def _answer_ticket(self, msg: dict) -> None:
        try:
            t = self._ticket()
            reply: dict[str, Any] = {"op": "ticket", "id": msg["id"], "key": key_to_pem(t["key"])}
            if "ws" in t:
                reply["ws"] = t["ws"]
            else:
                reply["tcp"] = list(t["tcp"])
        except Exception as exc:  # noqa: BLE001 - the child turns it into one AccessError
            text = str(exc) if isinstance(exc, AccessError) else f"{type(exc).__name__}: {exc}"
            reply = {"op": "ticket", "id": msg["id"], "error": text}
        with contextlib.suppress(OSError, ValueError):
            self._send(reply)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                op = msg.get("op")
                if op == "ticket?":
                    self._answer_ticket(msg)
                elif op == "pin":
                    with contextlib.suppress(HostKeyMismatch):  # the child aborts on it
                        self._pins.check_blob(self._host_id, msg["name"], msg["blob"])
                elif op == "ready":
                    self.local_port = int(msg["port"])
                    self._ready.set()
                elif op in ("exec-err", "exec-done") and msg.get("id") in self._execs:
                    q, on_stderr = self._execs[msg["id"]]
                    if op == "exec-done":
                        q.put(msg)
                    elif on_stderr is not None:
                        on_stderr(base64.b64decode(msg["data"]))
                elif op == "reconnected":
                    self.reconnects = int(msg["n"])
                elif op == "fatal":
                    self._fatal = msg
                    self.error = msg["error"]
                    if self._ready.is_set():
                        log.error("tunnel to %s closed: %s", self._host_id, msg["error"])
                    self._ready.set()
        except (OSError, ValueError):
            pass
        finally:
            if not self._closing and self.error is None and self._ready.is_set() and self.local_port:
                self.error = f"tunnel process exited (status {self.proc.poll()})"
                log.error("tunnel to %s: %s", self._host_id, self.error)
            self._ready.set()
            for q, _ in list(self._execs.values()):
                q.put({"op": "exec-done", "error": "the tunnel process exited"})

    def run_remote(self, command: str, stdin: bytes = b"", *, on_stderr: Callable[[bytes], None] | None = None,
                   cancel: threading.Event | None = None, keep_stdin_open: bool = False) -> tuple[int, bytes]:
        """(exit status, stdout) of ``command`` on the far side, run by the child over its SSH
        connection (``harness.access.remote_exec``). Ctrl-C or ``cancel`` closes the remote channel."""
        n = next(self._ids)
        q: queue.SimpleQueue = queue.SimpleQueue()
        self._execs[n] = (q, on_stderr)
        try:
            self._send({"op": "exec", "id": n, "cmd": command, "stdin": base64.b64encode(stdin).decode(),
                        "keep_stdin_open": keep_stdin_open})
            while True:
                try:
                    msg = q.get(timeout=0.5)
                except queue.Empty:
                    if cancel is not None and cancel.is_set():
                        self._send({"op": "exec-cancel", "id": n})
                        cancel = None  # asked once; the child answers with exec-done
                    continue
                if "error" in msg:
                    raise RemoteError(msg["error"])
                return int(msg["status"]), base64.b64decode(msg["stdout"])
        except KeyboardInterrupt:
            with contextlib.suppress(OSError, ValueError):
                self._send({"op": "exec-cancel", "id": n})
            raise
        except (OSError, ValueError) as exc:  # the pipe to the child broke
            raise RemoteError(f"the tunnel process is gone: {exc}") from exc
        finally:
            self._execs.pop(n, None)

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError, ValueError):
            self._send({"op": "close"})
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()

    def __enter__(self) -> "ProcessForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
