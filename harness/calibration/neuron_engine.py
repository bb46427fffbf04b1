"""Print what batching buys on a running Neuron engine (``ami/neuron``), from the server's own
usage counts and the client's clock.

    python -m harness.calibration.neuron_engine --url http://127.0.0.1:8000 --model google/gemma-4-E2B-it
    make bench-engine ARGS='--url http://127.0.0.1:8000 --model tiny-random-gemma4'

By default it runs four engine-efficiency cases in one run, each after the previous one ends:

- uniform: 4 closed-loop streams, every request 64 new tokens (the batch-size level);
- mixed: 8 closed-loop streams whose requests ask 256, 16 and 64 new tokens in turn (each stream
  starts at a different place in the cycle and goes through it ``--rounds`` times), so short and
  long rows share the batch (the last long requests finish with the batch part empty whatever
  the scheduler; more rounds make that tail a smaller part of the run);
- join: two requests of 384 new tokens, then one of 8 sent ``--join-delay`` s later (sooner if
  the long ones are a quarter through by then, so it arrives while they decode on a fast engine
  too): its time to first token against the long requests' duration (a wave scheduler makes it
  wait for them);
- 16 streams of 64 tokens, closed loop: median time to first token when requests queue.

The verdict line compares mixed with uniform throughput and the join TTFT with the long
requests' duration (the goals: >= 0.85 and <= 10%). ``--concurrency 1,2,4,8`` runs the
older sweep instead (``--tokens`` per request at each level). Every request asks for exactly
its token count (``ignore_eos``, which the engine honours as vLLM does), greedy.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import aiohttp

from harness.calibration.args import positive, positive_ints
from kit.cli import OneLineParser, one_line_errors

PROG = "python -m harness.calibration.neuron_engine"
UNIFORM = (4, 64)  # streams, tokens per request
MIXED = (8, (256, 16, 64))  # streams, token counts asked in turn
JOIN = (384, 8)  # the two long requests, the late short one
MANY = (16, 64)


@dataclass
class Result:
    ttft: float  # s to the first streamed delta carrying text
    e2e: float  # s to the end of the stream
    tokens: int  # completion_tokens as the server counted them
    start: float  # perf_counter when sent


async def _one(session: aiohttp.ClientSession, url: str, model: str, tokens: int, i: int,
               progress: list | None = None) -> Result:
    """One streamed request; ``progress[0]`` counts its content chunks as they come."""
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
            if chunk.get("choices"):
                delta = chunk["choices"][0].get("delta") or {}
                # Generated text, whichever channel it lands in (a random model may open a
                # thought channel, which the engine streams as reasoning_content).
                if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                    first = first if first is not None else time.perf_counter() - start
                    if progress is not None:
                        progress[0] += 1
            usage = chunk.get("usage") or usage
    end = time.perf_counter() - start
    return Result(first if first is not None else end, end, usage["completion_tokens"], start)


async def _streams(session, url, model, n: int, asks, rounds: int) -> tuple[list[Result], float]:
    """``n`` closed-loop streams of ``rounds`` requests; stream ``w``'s k-th request asks
    ``asks[(w + k) % len(asks)]`` tokens. Returns the results and the wall time."""
    async def worker(w: int) -> list[Result]:
        return [await _one(session, url, model, asks[(w + k) % len(asks)], w * rounds + k) for k in range(rounds)]

    t0 = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(worker(w) for w in range(n))) for r in rs]
    return results, time.perf_counter() - t0


def _p50(values) -> float:
    return statistics.median(values)


def _level_line(name: str, results: list[Result], wall: float) -> tuple[str, float]:
    total = sum(r.tokens for r in results)
    tps = total / wall
    return (f"{name:<8} {len(results):>8} {total:>7} {tps:>11.1f} {_p50(r.ttft for r in results) * 1000:>11.0f} "
            f"{_p50(r.e2e for r in results):>9.2f}", tps)


async def _cases(url: str, model: str, rounds: int, join_delay: float, echo) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        await _one(session, url, model, 4, 0)  # warm-up (first request may load graphs)
        echo(f"{'case':<8} {'requests':>8} {'tokens':>7} {'tok/s total':>11} {'ttft p50 ms':>11} {'e2e p50 s':>9}")
        n, tokens = UNIFORM
        line, uniform = _level_line("uniform", *await _streams(session, url, model, n, (tokens,), rounds))
        echo(line + f"   {n} streams x {tokens} tokens")
        n, asks = MIXED
        line, mixed = _level_line("mixed", *await _streams(session, url, model, n, asks, rounds * len(asks)))
        echo(line + f"   {n} streams asking {'/'.join(map(str, asks))} in turn, {rounds} times over")
        long_tokens, short_tokens = JOIN
        progress = [[0], [0]]
        t0 = time.perf_counter()
        longs = [asyncio.ensure_future(_one(session, url, model, long_tokens, 1000 + k, progress[k]))
                 for k in range(2)]
        # join_delay, or sooner once both long streams are a quarter through: on a fast engine
        # they could otherwise be over before the late request is even sent.
        while time.perf_counter() - t0 < join_delay and min(p[0] for p in progress) < long_tokens // 4:
            await asyncio.sleep(0.002)
        sent = time.perf_counter() - t0
        short = await _one(session, url, model, short_tokens, 2000)
        long_results = await asyncio.gather(*longs)
        long_s = max(r.e2e for r in long_results)
        share = short.ttft / long_s
        during = sent < min(r.e2e for r in long_results)  # sent while both were still decoding
        echo(f"join     2 x {long_tokens} tokens took {long_s:.2f} s; a {short_tokens}-token request sent "
             f"{sent:.2f} s later: first token after {short.ttft * 1000:.0f} ms ({share:.0%} of the long "
             f"requests' duration), done after {short.e2e:.2f} s"
             + ("" if during else "; the long requests had ended before it was sent: the case measured nothing"))
        n, tokens = MANY
        line, _ = _level_line(f"{n}x{tokens}", *await _streams(session, url, model, n, (tokens,), rounds))
        echo(line + f"   {n} streams x {tokens} tokens (TTFT p50 is the queueing figure)")
        echo(f"verdict  mixed/uniform throughput {mixed / uniform:.2f} (goal >= 0.85); late short request's "
             f"TTFT {share:.0%} of the long requests' duration (goal <= 10%)")


async def _sweep(url: str, model: str, tokens: int, concurrencies: list[int], rounds: int, echo) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await _one(session, url, model, 4, 0)  # warm-up (first request may load graphs)
        echo(f"{'concurrency':>11} {'requests':>8} {'tok/s total':>11} {'tok/s/stream':>12} "
             f"{'ttft p50 ms':>11} {'e2e p50 s':>9}")
        for c in concurrencies:
            results, wall = await _streams(session, url, model, c, (tokens,), rounds)
            total = sum(r.tokens for r in results)
            e2e = _p50(r.e2e for r in results)
            echo(f"{c:>11} {len(results):>8} {total / wall:>11.1f} {tokens / e2e:>12.1f} "
                 f"{_p50(r.ttft for r in results) * 1000:>11.0f} {e2e:>9.2f}")


@one_line_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", help="the served model id (needed with --url's running engine)")
    p.add_argument("--simulated", action="store_true",
                   help="host efficiency: start the engine on a paced stand-in device at Gemma 4's vocabulary "
                        "at each level and print the table (harness/calibration/host_efficiency.py)")
    p.add_argument("--step-ms", type=positive(float), default=6.0, help="simulated: decode step (default 6)")
    p.add_argument("--prefill-ms", type=positive(float), default=40.0, help="simulated: prefill (default 40)")
    p.add_argument("--concurrency", type=positive_ints,
                   help="comma-separated levels: run the older sweep (--tokens per request) instead of the cases")
    p.add_argument("--tokens", type=positive(int), default=128, help="sweep: new tokens per request (default 128)")
    p.add_argument("--rounds", type=positive(int), default=2,
                   help="requests per stream at the uniform, 16-stream and sweep levels, passes over "
                        "the 256/16/64 cycle at the mixed one (default 2)")
    p.add_argument("--join-delay", type=positive(float), default=0.5,
                   help="join case: seconds between the long requests and the short one (default 0.5)")
    a = p.parse_args(argv)
    if a.simulated:
        from harness.calibration import host_efficiency
        return host_efficiency.main(a.step_ms, a.prefill_ms, a.tokens if a.tokens != 128 else 64)
    if not a.model:
        p.error("--model is required unless --simulated (the id the running engine serves)")
    url = a.url.rstrip("/")
    try:
        if a.concurrency:
            asyncio.run(_sweep(url, a.model, a.tokens, a.concurrency, a.rounds, print))
        else:
            asyncio.run(_cases(url, a.model, a.rounds, a.join_delay, print))
    except aiohttp.ClientError as exc:
        raise SystemExit(f"{PROG}: cannot reach {a.url}: {exc}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
