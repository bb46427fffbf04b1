"""Print what batching buys on a running Neuron engine (``ami/neuron``): streamed tokens per
second at several concurrencies, from the server's own usage counts.

    python -m harness.calibration.neuron_engine --url http://127.0.0.1:8000 --model google/gemma-4-E2B-it
    make bench-engine ARGS='--url http://127.0.0.1:8000 --model tiny-random-gemma4 --tokens 64'

Each request asks for exactly ``--tokens`` new tokens (``ignore_eos``, which the engine honours
as vLLM does), so runs compare. A smoke check of an engine's batching as much as a measurement;
the harness benchmark is the measurement of record.
"""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from harness.calibration.args import Parser, positive, positive_ints

PROG = "python -m harness.calibration.neuron_engine"


async def _one(session: aiohttp.ClientSession, url: str, model: str, tokens: int, i: int):
    body = {"model": model, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0,
            "messages": [{"role": "user", "content": f"Count upwards from {i}."}]}
    start, first, usage = time.perf_counter(), None, None
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise SystemExit(f"{PROG}: HTTP {r.status} from {url}: {' '.join((await r.text()).split())[:300]}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    return first or 0.0, time.perf_counter() - start, usage["completion_tokens"]


async def _run(url: str, model: str, tokens: int, concurrencies: list[int], rounds: int) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await _one(session, url, model, 4, 0)  # warm-up (first request may load graphs)
        print(f"{'concurrency':>11} {'requests':>8} {'tok/s total':>11} {'tok/s/stream':>12} "
              f"{'ttft p50 ms':>11} {'e2e p50 s':>9}")
        for c in concurrencies:
            async def worker(w: int):  # closed loop: each of c streams sends its next when done
                return [await _one(session, url, model, tokens, w * rounds + k) for k in range(rounds)]

            t0 = time.perf_counter()
            results = [r for rs in await asyncio.gather(*(worker(w) for w in range(c))) for r in rs]
            wall = time.perf_counter() - t0
            total = sum(r[2] for r in results)
            ttft = sorted(r[0] for r in results)[len(results) // 2]
            e2e = sorted(r[1] for r in results)[len(results) // 2]
            print(f"{c:>11} {len(results):>8} {total / wall:>11.1f} {tokens / e2e:>12.1f} "
                  f"{ttft * 1000:>11.0f} {e2e:>9.2f}")


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", type=positive(int), default=128, help="new tokens per request (default 128)")
    p.add_argument("--concurrency", type=positive_ints, default=[1, 2, 4, 8], help="comma-separated (default 1,2,4,8)")
    p.add_argument("--rounds", type=positive(int), default=2, help="requests per stream (default 2)")
    a = p.parse_args(argv)
    try:
        asyncio.run(_run(a.url.rstrip("/"), a.model, a.tokens, a.concurrency, a.rounds))
    except aiohttp.ClientError as exc:
        raise SystemExit(f"{PROG}: cannot reach {a.url}: {exc}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
