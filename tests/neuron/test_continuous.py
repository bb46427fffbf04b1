"""Continuous batching on the CPU generator's real transformers model (the tiny random Gemma 4):
a request that arrives while others decode joins them at the next step, gets its first token
long before they finish, and its greedy tokens are the ones it gets when run alone; the rows it
joined are unchanged too, including one that leaves halfway. Prompt log-probabilities read by
feeding the prompt one decode step per token (the Neuron way) equal those of a full prefill."""
from __future__ import annotations

import asyncio
import contextlib

import pytest

pytest.importorskip("torch", reason="the CPU generator needs torch (requirements-engine.txt)")

from ami.neuron import cpu_generator
from ami.neuron.generator import Limits, SamplingParams
from ami.neuron.scheduler import PromptLogprobs

LONG = 300  # the tiny model's sliding window is 64: long rows cross it while others join and leave


@pytest.fixture(scope="module")
def gen():
    return cpu_generator.make_generator("tiny", None, True, Limits(256, 1024, 4), 0.0, threads=1)


def ids(gen, text: str) -> list[int]:
    return gen.chat.render([{"role": "user", "content": text}], None)


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(n, 0.0, ignore_eos=True, **kw)


async def run(gen, prompt, params, progress=None, key=None, stop_after=None):
    out = []
    async with contextlib.aclosing(gen.generate(prompt, params)) as tokens:
        async for t in tokens:
            out.append(t)
            if progress is not None:
                progress[key] = len(out)
            if stop_after and len(out) >= stop_after:
                break  # the client leaves: its slot is freed at the next step
    return out


def test_a_request_joining_a_busy_batch_starts_at_once_with_the_tokens_it_gets_alone(gen):
    short = ids(gen, "hello there")
    longs = [ids(gen, "the quick brown fox"), ids(gen, "a much longer question: how many ids are >= 10? "
                                                      "Use the count_ids tool, then answer.")]

    async def main():
        await gen.start()
        try:
            alone = {"short": await run(gen, short, greedy(40))}
            for k, p in enumerate(longs):
                alone[k] = await run(gen, p, greedy(LONG))
            progress = {0: 0, 1: 0, "leaver": 0}
            tasks = [asyncio.ensure_future(run(gen, p, greedy(LONG), progress, k)) for k, p in enumerate(longs)]
            leaver = asyncio.ensure_future(run(gen, longs[1], greedy(LONG), progress, "leaver", stop_after=30))
            while min(progress.values()) < 20:  # three rows are decoding together
                await asyncio.sleep(0.001)
            first_at, joined = None, []
            async with contextlib.aclosing(gen.generate(short, greedy(40))) as tokens:
                async for t in tokens:
                    first_at = first_at or dict(progress)
                    joined.append(t)
            together = await asyncio.gather(*tasks)
            left = await leaver
            return alone, joined, first_at, together, left, gen.stats()
        finally:
            await gen.close()

    alone, joined, first_at, together, left, stats = asyncio.run(main())
    # The short request's first token came while both long rows were still decoding, far from done.
    assert first_at[0] < LONG and first_at[1] < LONG, first_at
    assert joined == alone["short"]
    assert together == [alone[0], alone[1]]  # the rows it joined, and one leaving, changed nothing
    assert left == alone[1][:30]
    assert stats["max_batch_size_seen"] >= 3 and stats["live_slots"] == 0


def test_prompt_logprobs_fed_token_by_token_equal_the_prefill_ones(gen):
    prompt = ids(gen, "Of these 11 ids, how many are >= 10?")
    params = greedy(3, logprobs=2, prompt_logprobs=2)
    runner = gen.scheduler.runner

    async def once():
        await gen.start()
        try:
            return await run(gen, prompt, params)
        finally:
            await gen.close()

    full = asyncio.run(once())
    runner.prompt_logits = False  # as on Neuron: one-token prefill, then the prompt fed step by step
    try:
        forced = asyncio.run(once())
    finally:
        del runner.prompt_logits
    assert isinstance(full[0], PromptLogprobs) and isinstance(forced[0], PromptLogprobs)
    a, b = full[0].entries, forced[0].entries
    assert len(a) == len(b) == len(prompt) and a[0] is None and b[0] is None
    for x, y in zip(a[1:], b[1:]):
        assert x.token == y.token and x.logprob == pytest.approx(y.logprob, abs=1e-4)
        assert [t for t, _ in x.top] == [t for t, _ in y.top]
    assert [s.token for s in full[1:]] == [s.token for s in forced[1:]]
    assert all(s.top[0][1] == pytest.approx(s.logprob) for s in full[1:])  # greedy: the top token
