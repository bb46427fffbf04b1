"""Fixtures for the Neuron engine: a free loopback port, the real CLI serving the tiny model in
a subprocess (once per session), and an in-process server for scripted generators."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

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
            raise AssertionError(f"server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"server on port {port} not healthy after {timeout}s")


# The shapes the subprocess server is "compiled" for: small, so limits are easy to cross.
TINY_ARGS = ["--prompt-buckets", "64,256", "--max-total-tokens", "512", "--batch-size", "4",
             "--batch-wait-ms", "150", "--cpu-threads", "1"]


@pytest.fixture(scope="session")
def tiny_server():
    """``python -m ami.neuron.server --device cpu --tiny-random`` on a free port: the real CLI."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ami.neuron.server", "--device", "cpu",
                             "--tiny-random", "--port", str(port), *TINY_ARGS],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class InProcessServer:
    """The engine's aiohttp app on its own event loop in a thread, for test generators."""

    def __init__(self, generator, backend: str = "scripted") -> None:
        from ami.neuron.server import build_app
        self.app = build_app(generator, backend)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        from aiohttp import web

        from ami.neuron.cli import DEFAULT_HEADER_TIMEOUT_S
        from ami.neuron.server import runner_options
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5, **runner_options(DEFAULT_HEADER_TIMEOUT_S))
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def __enter__(self) -> "InProcessServer":
        self._thread.start()
        assert self._ready.wait(30), "in-process server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from ami.neuron import tiny
    return tiny.build_tokenizer()
