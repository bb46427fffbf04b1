"""Ending a child process the same way everywhere: SIGTERM, a grace period, then SIGKILL."""
from __future__ import annotations

import contextlib
import subprocess


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
