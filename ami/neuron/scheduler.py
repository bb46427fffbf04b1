"""Queue and batch concurrent requests up to the compiled batch size (both generators).

A compiled Neuron model runs a fixed batch of sequences through a fixed total length, so the
scheduler works in waves: when the model is free it takes the oldest waiting requests, as many
as the batch holds and as long as they fit together (longest prompt + largest generation budget
<= compiled total length), runs them as one batch, and streams each sequence's tokens to its
caller as they come. Requests that arrive meanwhile wait for the next wave. A short gathering
window (``wait_s``) lets requests that arrive together share a wave.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass, field
from typing import Callable, Protocol

log = logging.getLogger(__name__)

_END = object()


@dataclass(eq=False)
class Row:
    """One sequence of a batch: what to run, and where its tokens go."""

    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop_ids: frozenset[int]
    emit: Callable[[object], None] = field(default=lambda item: None, repr=False)
    cancelled: bool = False


class Runner(Protocol):
    def run(self, rows: list[Row]) -> None:
        """Run one batch to completion (blocking, in a worker thread). Call ``row.emit(token_id)``
        for each generated token, the stop token included, and nothing after a row is done."""


def fits(rows: list[Row], max_total: int) -> bool:
    """Can these rows share one batch? Prompts are padded to the longest one and every row
    decodes until the largest generation budget is spent or it stops."""
    return max(len(r.prompt_ids) for r in rows) + max(r.max_new for r in rows) <= max_total


class _TokenStream:
    """Async iterator of one request's token ids. Closing it (client gone, or done) cancels the
    row: it is skipped if still queued, and stops at the next step if running."""

    def __init__(self, row: Row, queue: asyncio.Queue) -> None:
        self.row, self.queue = row, queue

    def __aiter__(self) -> "_TokenStream":
        return self

    async def __anext__(self) -> int:
        try:
            item = await self.queue.get()
        except BaseException:
            self.row.cancelled = True
            raise
        if item is _END:
            self.row.cancelled = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self.row.cancelled = True
            raise item
        return item

    async def aclose(self) -> None:
        self.row.cancelled = True


class BatchScheduler:
    def __init__(self, runner: Runner, max_batch: int, max_total: int, wait_s: float = 0.005):
        self.runner, self.max_batch, self.max_total, self.wait_s = runner, max_batch, max_total, wait_s
        self._pending: collections.deque[Row] = collections.deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._batch_sizes: collections.Counter[int] = collections.Counter()
        self.busy = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="batch-scheduler")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def stats(self) -> dict:
        return {"running": self.running, "queued": len(self._pending), "busy": self.busy,
                "batches": sum(self._batch_sizes.values()),
                "batch_sizes": dict(sorted(self._batch_sizes.items())),
                "max_batch_size_seen": max(self._batch_sizes, default=0)}

    def submit(self, row: Row) -> "_TokenStream":
        if len(row.prompt_ids) + row.max_new > self.max_total:
            raise ValueError(f"row needs {len(row.prompt_ids) + row.max_new} positions, "
                             f"compiled total is {self.max_total}")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        row.emit = lambda item: loop.call_soon_threadsafe(queue.put_nowait, item)
        self._pending.append(row)
        self._arrived.set()
        return _TokenStream(row, queue)

    def _take(self) -> list[Row]:
        batch: list[Row] = []
        while self._pending and len(batch) < self.max_batch:
            head = self._pending[0]
            if head.cancelled:
                self._pending.popleft()
                head.emit(_END)
                continue
            if batch and not fits(batch + [head], self.max_total):
                break  # keep arrival order: the head waits for the next wave
            batch.append(self._pending.popleft())
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            deadline = loop.time() + self.wait_s
            while len(self._pending) < self.max_batch and loop.time() < deadline:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            batch = self._take()
            if not batch:
                continue
            self._batch_sizes[len(batch)] += 1
            self.busy = True
            try:
                await asyncio.to_thread(self.runner.run, batch)
                outcome: object = _END
            except Exception as exc:  # one failed batch must not take the server down
                log.exception("batch of %d failed", len(batch))
                outcome = RuntimeError(f"generation failed: {exc}")
            finally:
                self.busy = False
            for row in batch:
                row.emit(outcome)
