"""The continuous-batching scheduler both generators use, driven by a fake slot runner (no model):
admission into free slots in arrival order, one decode step over the live slots, a finished or
abandoned row freeing its slot at once, the bounded queue, failures, statistics."""
from __future__ import annotations

import asyncio
import threading

import pytest

from ami.neuron.scheduler import BatchScheduler, PromptLogprobs, QueueFull, Row, Sampled

from .fake_slots import FakeSlotRunner


def row(prompt_len: int, max_new: int, stop=frozenset(), **kw) -> Row:
    return Row(list(range(1, prompt_len + 1)), max_new, 0.0, 1.0, frozenset(stop), **kw)


def counting() -> FakeSlotRunner:
    """Next token = tokens so far in the slot: a row of prompt length p emits p, p+1, ..."""
    return FakeSlotRunner(next_token=len, slots=2)


async def collect(it):
    return [t async for t in it]


async def started(s: BatchScheduler, runner: FakeSlotRunner) -> None:
    while not runner.calls:
        await asyncio.sleep(0.001)


def test_rows_are_admitted_in_arrival_order_and_a_freed_slot_is_refilled_at_once():
    async def main():
        gate = threading.Event()
        runner = FakeSlotRunner(next_token=len, slots=2, gate=gate)
        s = BatchScheduler(runner, max_total=100, wait_s=0.0)
        await s.start()
        first = asyncio.ensure_future(collect(s.submit(row(1, 8))))  # long: 8 tokens
        await started(s, runner)
        rest = [asyncio.ensure_future(collect(s.submit(row(n, 2)))) for n in (2, 3, 4)]
        gate.set()
        out = await asyncio.gather(first, *rest)
        await s.stop()
        return runner.calls, out, s.stats()

    calls, out, stats = asyncio.run(main())
    assert out == [list(range(1, 9)), [2, 3], [3, 4], [4, 5]]
    prefills = [c for c in calls if c[0] == "prefill"]
    assert [n for _, _, n in prefills] == [1, 2, 3, 4]  # arrival order
    # Each short row ends after one decode step; the next waiting row takes its slot while the
    # long row (slot 0) keeps decoding: the long row never waits for them, nor they for it.
    i3, i4 = calls.index(("prefill", 1, 3)), calls.index(("prefill", 1, 4))
    assert calls[i3 - 1] == ("decode", (0, 1)) and calls[i4 - 1] == ("decode", (0, 1))
    assert sum(1 for c in calls if c == ("decode", (0,))) >= 1  # the long row went on alone
    assert all(len(c[1]) <= 2 for c in calls if c[0] == "decode")
    assert stats["admitted"] == stats["finished"] == 4 and stats["live_slots"] == 0
    assert stats["max_batch_size_seen"] == 2 and stats["queued"] == 0


def test_a_long_request_is_not_starved_by_later_short_ones():
    """A long request queued behind busy slots is admitted before every short one sent after it."""
    async def main():
        runner = FakeSlotRunner(slots=1, next_token=len)
        s = BatchScheduler(runner, max_total=200, wait_s=0.0)
        await s.start()
        busy = asyncio.ensure_future(collect(s.submit(row(1, 3))))
        await started(s, runner)
        long = asyncio.ensure_future(collect(s.submit(row(50, 10))))
        shorts = [asyncio.ensure_future(collect(s.submit(row(2, 1)))) for _ in range(5)]
        await asyncio.gather(busy, long, *shorts)
        await s.stop()
        return [n for kind, _, *n in runner.calls if kind == "prefill"]

    assert asyncio.run(main()) == [[1], [50], [2], [2], [2], [2], [2]]


def test_stop_token_ends_a_row_and_is_delivered():
    async def main():
        s = BatchScheduler(counting(), 50, 0.0)
        await s.start()
        out = await collect(s.submit(row(4, 10, stop={6})))
        await s.stop()
        return out

    assert asyncio.run(main()) == [4, 5, 6]


def test_a_failed_step_fails_its_requests_and_the_engine_keeps_serving():
    async def main():
        runner = FakeSlotRunner(slots=2, fail_decode=1)
        s = BatchScheduler(runner, 50, 0.0)
        await s.start()
        with pytest.raises(RuntimeError, match="generation failed: device out of memory"):
            await collect(s.submit(row(1, 3)))
        ok = await collect(s.submit(row(1, 2)))
        await s.stop()
        return ok, runner.releases, s.stats()

    ok, releases, stats = asyncio.run(main())
    assert ok == [40, 40] and releases == [0, 0]  # the failed row's slot was freed, then reused
    assert stats["running"] is False  # stopped by the test, not by the failure


def test_a_request_over_the_total_is_refused_before_queueing():
    async def main():
        s = BatchScheduler(counting(), 10, 0.0)
        with pytest.raises(ValueError, match="needs 11 positions"):
            s.submit(row(6, 5))

    asyncio.run(main())


def test_an_abandoned_queued_request_never_reaches_the_model_and_a_live_one_frees_its_slot():
    async def main():
        runner = FakeSlotRunner(slots=1, step_s=0.002)
        s = BatchScheduler(runner, 1000, 0.0)
        await s.start()
        live = s.submit(row(1, 500))
        assert await anext(live) == 40
        queued = s.submit(row(7, 50))
        await queued.aclose()  # client gone before its turn
        await live.aclose()  # client gone mid-stream
        after = await collect(s.submit(row(3, 2)))
        await s.stop()
        return runner.calls, after

    calls, after = asyncio.run(main())
    assert after == [40, 40]
    assert [c for c in calls if c[0] == "prefill"] == [("prefill", 0, 1), ("prefill", 0, 3)]
    assert sum(c[0] == "decode" for c in calls) < 100  # the 500-token row stopped early


def test_a_full_queue_refuses_with_a_retry_delay_and_takes_all_or_nothing():
    async def main():
        gate = threading.Event()
        runner = FakeSlotRunner(slots=1, gate=gate)
        s = BatchScheduler(runner, 100, 0.0, max_queue=2)
        await s.start()
        held = asyncio.ensure_future(collect(s.submit(row(1, 2))))
        await started(s, runner)
        waiting = [asyncio.ensure_future(collect(s.submit(row(1, 1)))) for _ in range(2)]
        with pytest.raises(QueueFull) as full:
            s.submit(row(1, 1))
        with pytest.raises(QueueFull):
            s.submit_many([row(1, 1), row(1, 1)])
        queued = s.stats()["queued"]
        gate.set()
        await asyncio.gather(held, *waiting)
        await s.stop()
        return full.value, queued

    full, queued = asyncio.run(main())
    assert queued == 2 and 1 <= full.retry_after <= 60
    assert "2 requests are waiting for one of 1 slots" in str(full)


def test_stats_report_slots_queue_and_step_timings():
    async def main():
        s = BatchScheduler(FakeSlotRunner(slots=3), 100, 0.0)
        await s.start()
        await asyncio.gather(*(collect(s.submit(row(2, 4))) for _ in range(3)))
        await s.stop()
        return s.stats()

    stats = asyncio.run(main())
    assert stats["slots"] == 3 and stats["live_slots"] == 0 and stats["max_queue"] == 64
    assert stats["timings"]["decode_step"]["count"] == stats["steps"] >= 3
    assert stats["timings"]["prefill"]["count"] == 3
    assert stats["timings"]["decode_step"]["p50_ms"] >= 0


def _prompt_logprob_run(prompt_logits: bool):
    async def main():
        runner = FakeSlotRunner(slots=2, next_token=lambda seq: len(seq) + 1, vocab=64)
        runner.prompt_logits = prompt_logits
        s = BatchScheduler(runner, 100, 0.0)
        await s.start()
        out = await collect(s.submit(row(5, 2, logprobs=1, prompt_logprobs=1)))
        await s.stop()
        return out, runner.calls

    return asyncio.run(main())


def test_prompt_logprobs_by_teacher_forcing_equal_those_of_a_full_prefill():
    """A runner that cannot return every prompt position's logits (compiled Neuron context
    encoding) gets the prompt fed one token per decode step; the numbers are the same."""
    full, calls_full = _prompt_logprob_run(True)
    forced, calls_forced = _prompt_logprob_run(False)
    assert full == forced
    head, *tokens = full
    assert isinstance(head, PromptLogprobs) and head.entries[0] is None and len(head.entries) == 5
    # prompt 1..5 and the fake predicts len(prefix) + 1: every prompt token is certain (log p = 0)
    assert [e.token for e in head.entries[1:]] == [2, 3, 4, 5]
    assert all(e.logprob == 0.0 and e.top == ((e.token, 0.0),) for e in head.entries[1:])
    assert [t.token for t in tokens] == [6, 7] and all(isinstance(t, Sampled) for t in tokens)
    assert calls_full[0] == ("prefill", 0, 5) and calls_forced[0] == ("prefill", 0, 1)
    assert sum(c[0] == "decode" for c in calls_forced) == 4 + 1  # four prompt tokens fed, then one
