"""Run one command on the far side of an SSH transport the tunnel already holds (no second login).

Used by ``--bench-from instance``: the bench is shipped on stdin, runs with the instance's
Python, and its results come back on stdout; stderr is passed on as it arrives (progress).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import paramiko

from kit.errors import KitError

_POLL_S = 0.02


class RemoteError(KitError, RuntimeError):
    """The remote command could not be started or its channel broke."""

    exit_code = 1


def run_on_transport(transport: paramiko.Transport, command: str, stdin: bytes = b"", *,
                     on_stderr: Callable[[bytes], None] | None = None,
                     cancel: threading.Event | None = None,
                     keep_stdin_open: bool = False) -> tuple[int, bytes]:
    """(exit status, stdout) of ``command`` in a session channel on ``transport``.

    ``cancel`` set: the channel is closed (sshd then closes the command's pipes) and the
    status is -1. ``keep_stdin_open``: no EOF after ``stdin`` until the command ends or is
    cancelled, so the command can watch its stdin to learn that its caller has gone. A
    transport that dies underneath raises ``RemoteError``.
    """
    try:
        chan = transport.open_session(timeout=15)
        chan.exec_command(command)
    except Exception as exc:
        raise RemoteError(f"could not start the remote command: {type(exc).__name__}: {exc}") from exc
    out: list[bytes] = []
    try:
        if stdin:
            chan.sendall(stdin)
        if not keep_stdin_open:
            chan.shutdown_write()
        while True:
            busy = False
            if chan.recv_ready():
                out.append(chan.recv(1 << 16))
                busy = True
            if chan.recv_stderr_ready():
                data = chan.recv_stderr(1 << 16)
                if on_stderr is not None:
                    on_stderr(data)
                busy = True
            if cancel is not None and cancel.is_set():
                return -1, b"".join(out)
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                # the status can come before the last bytes: drain what is left. A stdin kept
                # open must end first: sshd does not close a session whose stdin is still open.
                if keep_stdin_open:
                    chan.shutdown_write()
                while data := chan.recv(1 << 16):
                    out.append(data)
                return chan.recv_exit_status(), b"".join(out)
            if not transport.is_active():
                raise RemoteError("the SSH transport closed while the remote command ran")
            if not busy:
                time.sleep(_POLL_S)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise RemoteError(f"remote command: {type(exc).__name__}: {exc}") from exc
    finally:
        try:
            chan.close()
        except Exception:  # noqa: BLE001 - closing a broken channel
            pass

