"""A client that goes away mid-stream frees its place in the batch at the next decoding step."""
from __future__ import annotations

import time

import httpx

from ami.neuron.chat import ChatFormat
from ami.neuron.generator import BatchedGenerator, Limits

from .conftest import InProcessServer
from .fake_slots import FakeSlotRunner


def EndlessRunner() -> FakeSlotRunner:  # noqa: N802 - a factory named as the class it stands in for
    """Token 40 every 5 ms per live slot; ``released`` is set when a slot is freed."""
    return FakeSlotRunner(slots=2, step_s=0.005)


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
        assert runner.released.wait(5), "row still decoding after the client left"
        assert sum(c[0] == "decode" for c in runner.calls) < 2000


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


def test_disconnected_completions_stream_frees_every_prompts_slot(tiny_tokenizer):
    runner = EndlessRunner()
    gen = BatchedGenerator("endless", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 100000, 2), runner)
    with InProcessServer(gen) as srv:
        body = {"model": "endless", "stream": True, "prompt": [[5, 6], [7, 8, 9]], "max_tokens": 90000,
                "ignore_eos": True, "logprobs": 0}
        with httpx.Client(timeout=10) as c:
            with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                got = [next(lines) for _ in range(8)]
                assert any(line.startswith("data: ") for line in got)
        deadline = time.monotonic() + 5
        while len(runner.releases) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(runner.releases) == [0, 1], "rows still decoding after the client left"
