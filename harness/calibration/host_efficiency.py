"""How much of the device's rate the Neuron engine's host path delivers, at Gemma 4's real shapes.

    python -m harness.calibration.neuron_engine --simulated          # the table below
    make bench-engine                                                  # the same

Each level starts ``python -m ami.neuron.server --device simulated`` (a paced stand-in for the
NeuronCore: exactly ``--step-ms`` per decode step and ``--prefill-ms`` per prefill, token ids or
logits of 262,144 columns back, a tokenizer of that size; ami/neuron/simulated.py) with the
engine's own defaults (torch threads as it ships them), then drives it from this process over
HTTP: closed-loop streamed chat requests of ``--tokens`` new tokens each (``ignore_eos``), greedy
or sampled (temperature 1.0, top-k 64, top-p 0.95: Gemma 4's recommended sampling), optionally
with log-probabilities (which take the host path). The device allows, for N requests of T tokens
over B' = min(batch, streams) rows: N x T tokens in N x prefill + N x (T - 1) / B' x step
seconds; efficiency is the delivered tokens/s over that. "Where the host time goes" comes from the
engine's /health: per decode step, the device's time, the host's sampling and emitting, and the
rest of the step loop (scheduling, waiting for the lock).
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import aiohttp

MODEL = "simulated-gemma4"
SAMPLED = {"temperature": 1.0, "top_p": 0.95, "top_k": 64}
GREEDY = {"temperature": 0}


@dataclass(frozen=True)
class Level:
    batch: int
    streams: int
    sampling: str  # device | host
    mode: str  # greedy | sampled | logprobs

    @property
    def body(self) -> dict:
        if self.mode == "greedy":
            return dict(GREEDY)
        if self.mode == "sampled":
            return dict(SAMPLED)
        return {**GREEDY, "logprobs": True}


def levels() -> list[Level]:
    out = [Level(b, b, sampling, mode) for sampling in ("device", "host") for mode in ("greedy", "sampled")
           for b in (1, 4, 8)]
    out += [Level(4, s, sampling, mode) for sampling in ("device", "host") for mode in ("greedy", "sampled")
            for s in (16, 64)]
    out += [Level(4, 4, "device", "logprobs")]
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine:
    """The simulated engine in a subprocess, for one level."""

    def __init__(self, level: Level, step_ms: float, prefill_ms: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "ami.neuron.server", "--device", "simulated", "--port", str(self.port),
               "--batch-size", str(level.batch), "--step-ms", str(step_ms), "--prefill-ms", str(prefill_ms),
               "--sampling", level.sampling, "--max-queue", "64", "--log-level", "warning"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> "Engine":
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the simulated engine exited: {self.proc.stderr.read()[-500:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the simulated engine did not answer /health within 120 s")

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
            return json.load(r)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _one(session, url: str, tokens: int, body: dict, i: int) -> int:
    req = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": tokens,
           "ignore_eos": True, "messages": [{"role": "user", "content": f"w{100 + i} w{200 + i} w300"}], **body}
    usage = None
    async with session.post(url + "/v1/chat/completions", json=req) as r:
        if r.status != 200:
            raise SystemExit(f"HTTP {r.status}: {' '.join((await r.text()).split())[:300]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    return usage["completion_tokens"]


async def _run(url: str, level: Level, tokens: int, requests: int) -> tuple[int, float, int]:
    """(tokens delivered, wall seconds, requests) for ``requests`` requests over ``level.streams``
    closed-loop streams."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as session:
        await _one(session, url, 2, level.body, 0)  # warm-up
        queue = list(range(requests))

        async def stream() -> int:
            got = 0
            while queue:
                got += await _one(session, url, tokens, level.body, queue.pop())
            return got

        t0 = time.perf_counter()
        total = sum(await asyncio.gather(*(stream() for _ in range(level.streams))))
        return total, time.perf_counter() - t0, requests


def device_rate(level: Level, tokens: int, requests: int, step_ms: float, prefill_ms: float) -> float:
    rows = min(level.batch, level.streams)
    seconds = requests * prefill_ms / 1000 + requests * (tokens - 1) / rows * step_ms / 1000
    return requests * tokens / seconds


def main(step_ms: float, prefill_ms: float, tokens: int, echo=print) -> int:
    echo(f"simulated device: {step_ms:g} ms per decode step, {prefill_ms:g} ms per prefill, vocabulary 262,144; "
         f"{tokens} new tokens per request; engine defaults (torch threads {os.environ.get('OMP_NUM_THREADS', 'as shipped')})")
    echo(f"{'batch':>5} {'streams':>7} {'sampling':>8} {'mode':>8} {'tok/s':>8} {'device allows':>13} "
         f"{'efficiency':>10} {'step ms':>7} {'host ms':>7} {'other ms':>8}")
    for level in levels():
        requests = max(level.streams * 2, 8)
        with Engine(level, step_ms, prefill_ms) as engine:
            total, wall, n = asyncio.run(_run(engine.url, level, tokens, requests))
            timings = engine.health()["scheduler"]["timings"]
        allowed = device_rate(level, tokens, n, step_ms, prefill_ms)
        got = total / wall
        step = timings.get("decode_step", {}).get("p50_ms", float("nan"))
        host = timings.get("host_step", {}).get("p50_ms", float("nan"))
        other = timings.get("between_steps", {}).get("p50_ms", float("nan"))
        echo(f"{level.batch:>5} {level.streams:>7} {level.sampling:>8} {level.mode:>8} {got:>8.0f} {allowed:>13.0f} "
             f"{got / allowed:>10.2f} {step:>7.2f} {host:>7.2f} {other:>8.2f}")
    return 0
