"""The kit's Neuron engine as a subprocess for tests: the real CLI (``python -m ami.neuron.server
--device cpu --tiny-random``) on a free loopback port, offline, waited for and stopped. Used by
tests/neuron (conftest's session server, test_hostile) and tests/accuracy/test_kit_engine."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Callable, Iterator

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen | None = None, timeout: float = 300) -> None:
    """Poll /health until it answers (returns as soon as it does). The deadline only stops a
    server that never comes up: on the loaded 2-core machine the tiny CPU engine took over 120 s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = proc.stderr.read()[-2000:] if proc.stderr else "(its stderr went to a file)"
            raise AssertionError(f"server exited with {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"server on port {port} not healthy after {timeout}s")


@contextlib.contextmanager
def tiny_engine(*args: str, stderr: int | IO = subprocess.PIPE, preexec_fn: Callable[[], None] | None = None,
                timeout: float = 300) -> Iterator[tuple[int, subprocess.Popen]]:
    """(port, process) of the engine started with ``args`` once /health answers; stopped after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ami.neuron.server", "--device", "cpu", "--tiny-random",
                             "--port", str(port), *args],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
                            preexec_fn=preexec_fn)
    try:
        wait_healthy(port, proc, timeout)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
