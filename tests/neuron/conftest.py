"""Fixtures for the Neuron engine: a free loopback port, the real CLI serving the tiny model in
a subprocess (once per session), and an in-process server for scripted generators."""
from __future__ import annotations

import asyncio
import threading

import pytest

from .engine_proc import free_port, tiny_engine

# The shapes the subprocess server is "compiled" for: small, so limits are easy to cross.
TINY_ARGS = ["--prompt-buckets", "64,256", "--max-total-tokens", "512", "--batch-size", "4",
             "--batch-wait-ms", "150", "--cpu-threads", "1"]


@pytest.fixture(scope="session")
def tiny_server():
    """``python -m ami.neuron.server --device cpu --tiny-random`` on a free port: the real CLI."""
    with tiny_engine(*TINY_ARGS) as (port, _):
        yield f"http://127.0.0.1:{port}"


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
