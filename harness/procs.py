"""Child processes and the loopback ports they listen on: ending a child the same way everywhere
(SIGTERM, a grace period, then SIGKILL), and picking a free port for one."""
from __future__ import annotations

import contextlib
import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, grace: float = 5.0) -> int | None:
    """Terminate ``proc`` if it still runs, kill it if it outlives ``grace`` seconds, reap it.
    Returns its exit status (None only if even SIGKILL did not end it within ``grace``)."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):  # it ended between poll and terminate
            proc.terminate()
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        return None
