"""Load generation: closed-loop concurrency and open-loop Poisson arrivals, backend-agnostic.

- Closed loop (``concurrency=C``): C workers, each sends its next request as soon as the
  previous one ends. The first ``warmup`` requests (default one per worker) are warm-up.
- Open loop (``rate=R``): arrivals at exponential gaps of mean 1/R s from a seeded RNG, each
  scheduled at its nominal time whatever the server does; ``max_inflight`` bounds client-side
  concurrency and any wait for it shows up as queue time (scheduled → sent).
- Caps: ``requests`` measured requests after warm-up, or ``duration`` seconds of measured
  sending. ``request_timeout`` bounds each request; ``deadline_ns`` (the run's hard time limit)
  bounds everything: no request starts after it and every one still in flight is cancelled at
  it and recorded as failed with class ``timeout``.
Every request that was scheduled is handed to ``emit`` exactly once, completed or failed.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Callable

from harness.bench.profiles import Profile
from harness.bench.record import Record, TokenCounter, now_ns


@dataclass(frozen=True)
class LevelSpec:
    concurrency: int | None = None
    rate: float | None = None
    requests: int | None = None
    duration: float | None = None
    warmup: int | None = None  # None: one per worker (closed loop), ceil(rate) (open loop)

    def key(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency} if self.concurrency is not None else {"rate": self.rate}

    @property
    def label(self) -> str:
        return f"concurrency={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}/s"

    def warmup_count(self) -> int:
        if self.warmup is not None:
            return self.warmup
        if self.concurrency is not None:
            return self.concurrency
        return max(1, int(-(-(self.rate or 1) // 1)))


@dataclass
class LevelResult:
    records: list[dict]
    interrupted: bool  # the hard time limit cut it short


async def run_level(client: Any, profile: Profile, spec: LevelSpec, *, level_run: str,
                    meta: dict[str, Any], emit: Callable[[dict], None], request_timeout: float,
                    deadline_ns: int, seed: int = 0, max_inflight: int = 1024,
                    token_counter: TokenCounter | None = None,
                    on_progress: Callable[[dict], None] | None = None) -> LevelResult:
    records: list[dict] = []
    warmup = spec.warmup_count()
    state = {"interrupted": False}
    level_meta = {**meta, **spec.key(), "level_run": level_run}

    def finish(rec: Record) -> None:
        d = rec.to_dict(token_counter)
        records.append(d)
        emit(d)
        if on_progress:
            on_progress(d)

    async def run_one(i: int, t_sched: int, gate: asyncio.Semaphore | None = None) -> None:
        rec = Record(f"{level_run}-{i:06d}", level_meta, warmup=i < warmup, t_scheduled_ns=t_sched)
        try:
            if gate is not None:
                await gate.acquire()
            try:
                remaining = (deadline_ns - now_ns()) / 1e9
                if remaining <= 0:
                    state["interrupted"] = True
                    rec.fail("timeout", "run time limit reached before the request was sent")
                    return
                limit = min(request_timeout, remaining)
                try:
                    # asyncio.timeout runs the request in this task (wait_for would start a new
                    # task and queue it behind every ready callback)
                    async with asyncio.timeout(limit):
                        await client.stream(profile.request(i, seed), rec)
                except TimeoutError:
                    if limit < request_timeout:
                        state["interrupted"] = True
                    rec.fail("timeout", f"no complete response within {limit:.1f} s"
                             + (" (run time limit)" if limit < request_timeout else ""))
                except Exception as e:  # noqa: BLE001 - a backend bug must not end the run
                    rec.fail("client", f"{type(e).__name__}: {e}")
                rec.finish()  # the end time is taken now; what follows is bookkeeping
                # Let the other streams whose chunks arrived in this same loop iteration take
                # their timestamps before this one does its bookkeeping and sends its next
                # request: with many streams finishing together, that work would otherwise
                # make their chunks look late.
                await asyncio.sleep(0)
            finally:
                if gate is not None:
                    gate.release()
        except asyncio.CancelledError:
            state["interrupted"] = True
            if not rec.ok:  # a request that had already completed stays completed
                rec.fail("timeout", "cancelled: run interrupted")
            raise
        finally:
            rec.finish()
            finish(rec)

    def past_deadline(t: int | None = None) -> bool:
        if (now_ns() if t is None else t) >= deadline_ns:
            state["interrupted"] = True
            return True
        return False

    if spec.concurrency is not None:
        tasks = _closed_loop(spec, warmup, run_one, past_deadline)
    else:
        tasks = [asyncio.create_task(_open_loop(spec, warmup, run_one, past_deadline, seed,
                                                max_inflight, deadline_ns))]
    grace = (deadline_ns - now_ns()) / 1e9 + 5.0
    try:
        done, pending = await asyncio.wait(tasks, timeout=max(grace, 0.1))
    except asyncio.CancelledError:
        # Ctrl-C (asyncio.Runner cancels the main task) or a caller's cancel: asyncio.wait
        # leaves the workers running, and they would go on sending through a backend that is
        # about to be closed and emit after the writer stopped. Cancel them and wait for each
        # to record its request, so every request sent is in requests.jsonl.
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for t in pending:  # only if a backend ignored cancellation; never hang the run
        t.cancel()
    if pending:
        state["interrupted"] = True
        await asyncio.gather(*pending, return_exceptions=True)
    for t in done:
        if t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    return LevelResult(records, state["interrupted"])


def _closed_loop(spec: LevelSpec, warmup: int, run_one, past_deadline) -> list[asyncio.Task]:
    total = None if spec.requests is None else warmup + spec.requests
    st: dict[str, Any] = {"next": 0, "measure_start": None}

    async def worker() -> None:
        while not past_deadline():
            i = st["next"]
            if total is not None and i >= total:
                return
            t = now_ns()
            if spec.duration is not None and i >= warmup:
                if st["measure_start"] is None:
                    st["measure_start"] = t
                elif t - st["measure_start"] >= spec.duration * 1e9:
                    return
            st["next"] = i + 1
            await run_one(i, t)

    return [asyncio.create_task(worker()) for _ in range(spec.concurrency or 1)]


async def _open_loop(spec: LevelSpec, warmup: int, run_one, past_deadline, seed: int,
                     max_inflight: int, deadline_ns: int) -> None:
    rng = random.Random(seed * 7919 + int((spec.rate or 1) * 1000))
    gate = asyncio.Semaphore(max_inflight)
    total = None if spec.requests is None else warmup + spec.requests
    tasks: list[asyncio.Task] = []
    t = now_ns()
    measure_start = None
    i = 0
    try:
        while total is None or i < total:
            t += int(rng.expovariate(spec.rate or 1.0) * 1e9)
            if i >= warmup and spec.duration is not None:
                if measure_start is None:
                    measure_start = t
                elif t - measure_start >= spec.duration * 1e9:
                    break
            if past_deadline(t):
                break
            # uvloop timers have 1 ms resolution and may fire early: sleep until really due
            while (delay := (t - now_ns()) / 1e9) > 0:
                await asyncio.sleep(max(delay, 0.0005))
            if past_deadline():
                break
            tasks.append(asyncio.create_task(run_one(i, t, gate)))
            i += 1
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
