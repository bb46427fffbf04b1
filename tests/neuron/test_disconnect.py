"""A client that goes away mid-stream frees its place in the batch at the next decoding step."""
from __future__ import annotations

import threading
import time

import httpx

from ami.neuron.chat import ChatFormat
from ami.neuron.generator import BatchedGenerator, Limits

from .conftest import InProcessServer


class EndlessRunner:
    """Emits token 40 every 5 ms per live row until every row is cancelled (or 20 s pass)."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.steps = 0

    def run(self, rows):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(r.cancelled for r in rows):
            for r in rows:
                if not r.cancelled:
                    r.emit(40)
            self.steps += 1
            time.sleep(0.005)
        self.stopped.set()


def test_disconnected_stream_stops_its_row(tiny_tokenizer):
    runner = EndlessRunner()
    gen = BatchedGenerator("endless", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 100000, 2), runner)
    with InProcessServer(gen) as srv:
        body = {"model": "endless", "stream": True, "messages": [{"role": "user", "content": "go"}],
                "ignore_eos": True}
        with httpx.Client(timeout=10) as c:
            with c.stream("POST", srv.url + "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                got = [next(lines) for _ in range(6)]
                assert all(line == "" or line.startswith("data: ") for line in got)
        # The connection is closed; the server notices on its next write and cancels the row.
        assert runner.stopped.wait(5), "row still decoding after the client left"
        assert runner.steps < 2000


def test_health_is_503_when_the_scheduler_is_gone(tiny_tokenizer):
    import asyncio

    gen = BatchedGenerator("x", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 128, 2), EndlessRunner())
    with InProcessServer(gen) as srv:
        with httpx.Client(timeout=10) as c:
            ok = c.get(srv.url + "/health")
            assert ok.status_code == 200 and ok.json()["scheduler"]["running"] is True
            asyncio.run_coroutine_threadsafe(gen.close(), srv._loop).result(5)
            dead = c.get(srv.url + "/health")
        assert dead.status_code == 503 and dead.json()["status"] == "error"
