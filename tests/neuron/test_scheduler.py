"""The batching scheduler both generators use, driven by a fake runner (no model)."""
from __future__ import annotations

import asyncio
import threading

import pytest

from ami.neuron.scheduler import BatchScheduler, Row, fits


def row(prompt_len: int, max_new: int, stop=frozenset()) -> Row:
    return Row(list(range(1, prompt_len + 1)), max_new, 0.0, 1.0, frozenset(stop))


class FakeRunner:
    """Emits prompt_len, prompt_len+1, ... per row; records every batch it was given."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate = gate

    def run(self, rows):
        if self.gate is not None:
            assert self.gate.wait(10)
        self.batches.append([len(r.prompt_ids) for r in rows])
        done = [False] * len(rows)
        for step in range(max(r.max_new for r in rows)):
            for i, r in enumerate(rows):
                if done[i] or r.cancelled:
                    continue
                token = len(r.prompt_ids) + step
                r.emit(token)
                done[i] = token in r.stop_ids or step + 1 >= r.max_new


async def collect(it):
    return [t async for t in it]


def test_fits_checks_longest_prompt_plus_largest_budget():
    assert fits([row(10, 5), row(3, 7)], 17)
    assert not fits([row(10, 5), row(3, 8)], 17)


def test_concurrent_requests_are_batched_up_to_the_batch_size_in_arrival_order():
    async def main():
        gate = threading.Event()
        runner = FakeRunner(gate)
        s = BatchScheduler(runner, max_batch=3, max_total=100, wait_s=0.0)
        await s.start()
        first = asyncio.ensure_future(collect(s.submit(row(1, 2))))
        while not s.busy:  # the first request is running alone; the rest queue behind it
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(collect(s.submit(row(n, 2)))) for n in (2, 3, 4, 5, 6)]
        await asyncio.sleep(0.01)
        gate.set()
        results = await asyncio.gather(first, *rest)
        await s.stop()
        return runner.batches, results, s.stats()

    batches, results, stats = asyncio.run(main())
    assert batches == [[1], [2, 3, 4], [5, 6]]
    assert results == [[1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [6, 7]]
    assert stats["batch_sizes"] == {1: 1, 2: 1, 3: 1} and stats["max_batch_size_seen"] == 3


def test_requests_that_do_not_fit_together_wait_for_the_next_wave():
    async def main():
        runner = FakeRunner()
        s = BatchScheduler(runner, max_batch=4, max_total=20, wait_s=0.05)
        await s.start()
        out = await asyncio.gather(collect(s.submit(row(15, 5))), collect(s.submit(row(2, 10))),
                                   collect(s.submit(row(3, 3))))
        await s.stop()
        return runner.batches, out

    batches, out = asyncio.run(main())
    assert batches == [[15], [2, 3]]  # 15 + 10 > 20: the second waits, the third joins it
    assert [len(o) for o in out] == [5, 10, 3]


def test_stop_token_ends_a_row_and_is_delivered():
    async def main():
        s = BatchScheduler(FakeRunner(), 2, 50, 0.0)
        await s.start()
        out = await collect(s.submit(row(4, 10, stop={6})))
        await s.stop()
        return out

    assert asyncio.run(main()) == [4, 5, 6]


def test_a_failed_batch_fails_its_requests_and_the_server_keeps_serving():
    class Flaky(FakeRunner):
        def run(self, rows):
            if not self.batches:
                self.batches.append([])
                raise MemoryError("device out of memory")
            super().run(rows)

    async def main():
        s = BatchScheduler(Flaky(), 2, 50, 0.0)
        await s.start()
        with pytest.raises(RuntimeError, match="generation failed: device out of memory"):
            await collect(s.submit(row(1, 2)))
        ok = await collect(s.submit(row(1, 2)))
        await s.stop()
        return ok

    assert asyncio.run(main()) == [1, 2]


def test_a_request_over_the_total_is_refused_before_queueing():
    async def main():
        s = BatchScheduler(FakeRunner(), 2, 10, 0.0)
        with pytest.raises(ValueError, match="needs 11 positions"):
            s.submit(row(6, 5))

    asyncio.run(main())


def test_abandoned_request_is_cancelled():
    async def main():
        gate = threading.Event()
        runner = FakeRunner(gate)
        s = BatchScheduler(runner, 2, 100, 0.0)
        await s.start()
        keep = asyncio.ensure_future(collect(s.submit(row(1, 1))))
        while not s.busy:
            await asyncio.sleep(0.001)
        abandoned = s.submit(row(7, 50))
        await abandoned.aclose()  # client went away before its wave
        gate.set()
        await keep
        await asyncio.sleep(0.05)
        await s.stop()
        return runner.batches

    assert asyncio.run(main()) == [[1]]  # the abandoned row never reached the model
