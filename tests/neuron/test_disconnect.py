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


def _send_and_close(url: str, path: str, body: dict, wait_s: float) -> None:
    """A client that sends a whole request and closes its socket, before any answer arrives
    (``wait_s`` after sending: 0 closes at once, later ones land while the request is queued)."""
    import json
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection((u.hostname, u.port), timeout=5) as s:
        s.sendall(head + data)
        time.sleep(wait_s)


def _idle(c, url: str, within_s: float) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        stats = c.get(url + "/health").json()["scheduler"]
        if stats["live_slots"] == 0 and stats["queued"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.02)


def test_clients_that_close_before_the_first_chunk_hold_no_slot(tiny_tokenizer):
    """Eight streaming clients (chat and completions) close 0-57 ms after sending: every slot is
    free again once they are gone, and a normal request is answered at once. A ghost would decode
    its 20,000 tokens for 100 s at 5 ms a step."""
    import threading

    runner = FakeSlotRunner(slots=4, step_s=0.005)
    gen = BatchedGenerator("endless", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 100000, 4), runner)
    chat = {"model": "endless", "stream": True, "messages": [{"role": "user", "content": "go"}],
            "ignore_eos": True, "max_tokens": 20000}
    text = {"model": "endless", "stream": True, "prompt": [[5, 6], [7, 8]], "max_tokens": 20000, "ignore_eos": True}
    with InProcessServer(gen) as srv:
        clients = [threading.Thread(target=_send_and_close, args=(srv.url, path, body, wait))
                   for wait, (path, body) in zip((0, 0.008, 0.016, 0.024, 0.033, 0.041, 0.049, 0.057),
                                                 [("/v1/chat/completions", chat), ("/v1/completions", text)] * 4)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        with httpx.Client(timeout=30) as c:
            stats = _idle(c, srv.url, within_s=10)
            assert stats["live_slots"] == 0 and stats["queued"] == 0, stats
            # behind ghosts this would wait 100 s and time out at 30
            r = c.post(srv.url + "/v1/chat/completions", json={**chat, "stream": False, "max_tokens": 4})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
