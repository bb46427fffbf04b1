"""Continuous batching over a fixed set of slots (both generators).

A compiled Neuron model decodes a fixed batch; each batch line keeps one sequence's KV cache.
The engine treats those lines as *slots*. One engine thread loops:

1. **Admit**: while a slot is free and a request waits, take the oldest waiting request (arrival
   order, so nothing starves behind a stream of short ones) and run its prefill alone, into that
   slot (Neuron: context encoding with ``seq_ids=[slot]``). Its first token is sampled and
   streamed at once.
2. **Step**: one decode step over every live slot together (Neuron: one token-generation call
   with the live slots' ``seq_ids``), one token per row.
3. **Free**: a row that ends (its stop token, its ``max_new`` budget, or its client gone) frees
   its slot right away; the next step's admission can fill it.

Each row keeps its own temperature, top-p, stop tokens and budget; sampling runs on the host on
the logits the runner returns. A bounded queue holds the requests waiting for a slot: when it is
full ``submit`` raises ``QueueFull`` (the server answers 429 with ``Retry-After``).

Log-probabilities, when a row asks for them, come from the model's own distribution (log-softmax
of the raw logits, before temperature and top-p), as vLLM returns them by default
(``Sampler(logprobs_mode="raw_logprobs")``, vllm-project/vllm ``vllm/v1/sample/sampler.py``).
Prompt log-probabilities (``echo`` with ``logprobs``) come from the prefill when the runner can
return every prompt position's logits (CPU); otherwise (a compiled context-encoding graph returns
only the last position's) the prompt is fed one token per decode step after a one-token prefill,
which yields the same numbers from the same graphs ("teacher forcing").
"""
from __future__ import annotations

import collections
import logging
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

log = logging.getLogger(__name__)

_END = object()  # end of a row's stream
TIMING_WINDOW = 256  # steps and prefills kept for /health's timing figures


class Sampled(NamedTuple):
    """A generated token with its log-probability and the ``top`` most likely alternatives
    (``(token_id, logprob)`` pairs, most likely first). Emitted instead of a bare id when the row
    asked for log-probabilities."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


class PromptLogprobs(NamedTuple):
    """Per prompt token: ``None`` for the first (nothing predicts it), else ``Sampled`` for that
    prompt token under the preceding ones. Emitted once, before the first generated token."""

    entries: tuple[Sampled | None, ...]


@dataclass(eq=False)
class Row:
    """One request: what to run, and where its tokens go."""

    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop_ids: frozenset[int]
    emit: Callable[[object], None] = field(default=lambda item: None, repr=False)
    cancelled: bool = False
    logprobs: int | None = None  # alternatives per generated token; None: no log-probabilities
    prompt_logprobs: int | None = None  # the same for the prompt tokens (completions' echo)
    top_k: int = 0  # 0: off
    seed: int | None = None  # a generator of the row's own: reproducible whatever shares the step
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple = ()  # (token id, bias) pairs
    # Structured output: output ids so far -> the token ids allowed next (None: any)
    allowed: Callable[[list[int]], object] | None = field(default=None, repr=False)


class DeviceOut(NamedTuple):
    """What a runner that samples on the device returns: one token per row (sampled with that
    row's top-k, top-p and temperature), and the logits of the rows that asked for them (for the
    host path), else None."""

    tokens: object  # (rows,) int tensor
    logits: object  # (rows, vocab) float tensor, or None


def needs_host(lv: "_Live") -> bool:
    """A row the device cannot sample for: it feeds its prompt for log-probabilities, reports
    log-probabilities (the model's own distribution), has a seed (the device draws from one
    generator for the batch), penalties, a logit bias or a structured-output constraint."""
    row = lv.row
    return bool(lv.forced or row.logprobs is not None or row.seed is not None or row.logit_bias
                or row.presence_penalty or row.frequency_penalty or row.repetition_penalty != 1.0
                or row.allowed is not None)


def device_params(row: Row) -> tuple[int, float, float]:
    """(top_k, top_p, temperature) as NxD Inference's dynamic sampler takes them per row
    (prepare_sampling_params stacks [top_k, top_p, temperature]); greedy is top_k 1."""
    if row.temperature <= 0:
        return (1, 1.0, 1.0)
    return (row.top_k, row.top_p, row.temperature)


class SlotRunner(Protocol):
    """What the engine needs from a device. Called from the engine thread only.

    A runner with ``device_sampling`` takes ``sampling`` (per row: top_k, top_p, temperature;
    top_k 1 is greedy) and ``want_logits`` (per row: the host needs its logits) on prefill and
    decode, and returns ``DeviceOut``; without it, prefill and decode return logits."""

    slots: int  # compiled batch size: sequences that can decode together
    prompt_logits: bool  # prefill can return the logits of every prompt position

    def prefill(self, slot: int, prompt_ids: list[int], all_logits: bool = False):
        """Encode ``prompt_ids`` into ``slot``'s KV cache. Returns float logits, shape
        (len(prompt_ids), vocab) with ``all_logits``, else (1, vocab) for the last position."""

    def decode(self, slots: list[int], tokens: list[int]):
        """Feed ``tokens[i]`` to ``slots[i]`` (every live slot, each once); return the next-token
        logits, shape (len(slots), vocab), in the same order."""

    def release(self, slot: int) -> None:
        """The slot's sequence is over; its KV cache may be reused."""


class QueueFull(RuntimeError):
    """No room to wait: the server answers 429 with ``Retry-After: retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NeverFits(ValueError):
    """More sequences in one request than the queue can ever hold: a 400, not a 429 (waiting
    would not help)."""


class _TokenStream:
    """Async iterator of one request's items. Closing it (client gone, or done) cancels the
    row: it is skipped if still queued, and frees its slot at the next step if running."""

    def __init__(self, row: Row, queue) -> None:
        self.row, self.queue = row, queue

    def __aiter__(self) -> "_TokenStream":
        return self

    async def __anext__(self):
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


@dataclass(eq=False)
class _Live:
    """A row in a slot: what it feeds next and what it has produced."""

    row: Row
    slot: int
    admitted: float  # perf_counter at admission
    next_input: int = -1  # token fed to the slot at the next decode step
    generated: int = 0
    forced: collections.deque = field(default_factory=collections.deque)  # prompt tokens still to feed
    prompt_entries: list | None = None  # prompt log-probabilities being collected
    output: list = field(default_factory=list)  # generated ids (penalties, allowed tokens)
    generator: object = None  # torch.Generator of a seeded row


def logprob_entry(logprobs, token: int, top: int) -> Sampled:
    """``token``'s log-probability in ``logprobs`` (1-D, log-softmax) and the ``top`` best."""
    best: tuple = ()
    if top:
        values, ids = logprobs.topk(top)
        best = tuple(zip(ids.tolist(), values.tolist()))
    return Sampled(token, float(logprobs[token]), best)


def _timing(samples) -> dict:
    values = sorted(samples)
    if not values:
        return {"count": 0}
    return {"count": len(values), "p50_ms": round(statistics.median(values) * 1000, 3),
            "p95_ms": round(values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)] * 1000, 3),
            "last_ms": round(samples[-1] * 1000, 3)}


class BatchScheduler:
    """The engine loop over a ``SlotRunner``, in its own thread; ``submit`` from the event loop."""

    def __init__(self, runner: SlotRunner, max_total: int, wait_s: float = 0.005,
                 max_queue: int = 64) -> None:
        self.runner, self.max_total, self.wait_s, self.max_queue = runner, max_total, wait_s, max_queue
        self.slots = runner.slots
        self._pending: collections.deque[Row] = collections.deque()
        self._cv = threading.Condition()
        self._live: dict[int, _Live] = {}
        self._free = list(range(self.slots))
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failed: BaseException | None = None
        self._rows_per_step: collections.Counter[int] = collections.Counter()
        self._step_s: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        self._prefill_s: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        self._service_s: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        # Host time per decode step: sampling and emitting its tokens, and the rest of the loop
        # between one step's end and the next step's start (admission, scheduling, the lock).
        self._host_s: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        self._between_s: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        self._last_step_end: float | None = None
        self.admitted = self.finished = 0

    # -- life cycle (event loop side) --------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        import asyncio

        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def busy(self) -> bool:
        return bool(self._live)

    def stats(self) -> dict:
        with self._cv:
            rows = dict(sorted(self._rows_per_step.items()))
            return {"running": self.running, "slots": self.slots, "live_slots": len(self._live),
                    "queued": len(self._pending), "max_queue": self.max_queue,
                    "admitted": self.admitted, "finished": self.finished,
                    "steps": sum(rows.values()), "batch_sizes": rows,
                    "max_batch_size_seen": max(rows, default=0),
                    "timings": {"decode_step": _timing(list(self._step_s)),
                                "prefill": _timing(list(self._prefill_s)),
                                "host_step": _timing(list(self._host_s)),
                                "between_steps": _timing(list(self._between_s))}}

    def retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the recent mean time a request
        holds a slot, times the queue ahead per slot; 1 to 60."""
        held = list(self._service_s)  # one C-level copy: the engine thread appends concurrently
        mean = statistics.fmean(held) if held else 1.0
        return max(1, min(60, math.ceil(mean * (len(self._pending) + 1) / self.slots)))

    def submit(self, row: Row) -> _TokenStream:
        return self.submit_many([row])[0]

    def submit_many(self, rows: list[Row]) -> list[_TokenStream]:
        """Queue rows together (all or none: a full queue refuses the whole request)."""
        import asyncio

        for row in rows:
            if len(row.prompt_ids) + row.max_new > self.max_total:
                raise ValueError(f"row needs {len(row.prompt_ids) + row.max_new} positions, "
                                 f"compiled total is {self.max_total}")
        loop = asyncio.get_running_loop()
        streams = []
        if len(rows) > self.max_queue:
            raise NeverFits(f"{len(rows)} prompts in one request; this engine queues at most {self.max_queue} "
                            f"sequences at a time (--max-queue {self.max_queue}): send at most {self.max_queue} "
                            "prompts per request")
        with self._cv:
            if self._failed is not None or self._stopping:
                raise RuntimeError("the engine has stopped")
            if len(self._pending) + len(rows) > self.max_queue:
                raise QueueFull(f"{len(self._pending)} requests are waiting for one of {self.slots} "
                                f"slots (the queue holds {self.max_queue}); retry later",
                                self.retry_after())
            for row in rows:
                queue: asyncio.Queue = asyncio.Queue()
                row.emit = lambda item, q=queue: loop.call_soon_threadsafe(q.put_nowait, item)
                self._pending.append(row)
                streams.append(_TokenStream(row, queue))
            self._cv.notify_all()
        return streams

    # -- engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        import torch

        try:
            with torch.inference_mode():
                while True:
                    with self._cv:
                        if not self._wait_for_work():
                            break
                    self._drop_cancelled()
                    self._admit()
                    if self._live:
                        self._step()
        except BaseException as exc:  # the loop itself broke: say so on /health, fail everyone
            log.exception("engine loop stopped")
            self._failed = exc
            self._fail_all(RuntimeError(f"generation failed: {exc}"))
        finally:
            self._fail_all(RuntimeError("the engine stopped"), quiet=True)

    def _wait_for_work(self) -> bool:
        """Under the lock: block while idle. When the engine was idle, wait up to ``wait_s``
        more so requests sent together start together. False when stopping."""
        if self._live:
            return not self._stopping
        while not self._pending and not self._stopping:
            self._cv.wait()
        deadline = time.monotonic() + self.wait_s
        while not self._stopping and len(self._pending) < len(self._free):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cv.wait(left)
        return not self._stopping

    def _fail_all(self, error: BaseException, quiet: bool = False) -> None:
        with self._cv:
            rows = [lv.row for lv in self._live.values()] + list(self._pending)
            self._live.clear()
            self._pending.clear()
            self._free = list(range(self.slots))
        for row in rows:
            row.emit(_END if quiet else error)

    def _drop_cancelled(self) -> None:
        for lv in [lv for lv in self._live.values() if lv.row.cancelled]:
            self._finish(lv)

    def _finish(self, lv: _Live, outcome: object = _END) -> None:
        self._live.pop(lv.slot, None)
        try:
            self.runner.release(lv.slot)
        finally:
            with self._cv:
                self._free.append(lv.slot)
                self._free.sort()
                self.finished += 1
            self._service_s.append(time.perf_counter() - lv.admitted)
            lv.row.emit(outcome)

    def _admit(self) -> None:
        while True:
            with self._cv:
                if not self._free or not self._pending:
                    return
                row = self._pending.popleft()
                if row.cancelled:
                    row.emit(_END)
                    continue
                slot = self._free.pop(0)
                self.admitted += 1
            lv = _Live(row, slot, time.perf_counter())
            if row.seed is not None:
                import torch

                lv.generator = torch.Generator().manual_seed(row.seed)
            self._live[slot] = lv
            prompt = row.prompt_ids
            want_prompt = row.prompt_logprobs is not None
            device = {}
            if getattr(self.runner, "device_sampling", False):
                device = {"sampling": [device_params(row)], "want_logits": [want_prompt or needs_host(lv)]}
            try:
                t0 = time.perf_counter()
                if want_prompt and not self.runner.prompt_logits:
                    # The prompt's log-probabilities come one decode step per token (see above).
                    logits = self.runner.prefill(slot, prompt[:1], **device)
                    lv.forced.extend(prompt[1:])
                    lv.prompt_entries = [None]
                else:
                    logits = self.runner.prefill(slot, prompt, all_logits=want_prompt, **device)
                    if want_prompt:
                        lv.prompt_entries = [None] + self._prompt_entries(logits[:-1], prompt[1:],
                                                                          row.prompt_logprobs)
                        logits = logits[-1:]
                self._prefill_s.append(time.perf_counter() - t0)
            except Exception as exc:  # one failed prefill fails its request, not the engine
                log.exception("prefill of %d tokens failed", len(prompt))
                self._finish(lv, RuntimeError(f"generation failed: {exc}"))
                continue
            self._consume([lv], logits)

    @staticmethod
    def _prompt_entries(logits, tokens: list[int], top: int) -> list[Sampled]:
        lp = logits.float().log_softmax(-1)
        return [logprob_entry(lp[i], t, top) for i, t in enumerate(tokens)]

    def _step(self) -> None:
        lvs = sorted(self._live.values(), key=lambda lv: lv.slot)
        try:
            t0 = time.perf_counter()
            if self._last_step_end is not None:
                self._between_s.append(t0 - self._last_step_end)
            device = {}
            if getattr(self.runner, "device_sampling", False):
                device = {"sampling": [device_params(lv.row) for lv in lvs],
                          "want_logits": [needs_host(lv) for lv in lvs]}
            logits = self.runner.decode([lv.slot for lv in lvs], [lv.next_input for lv in lvs], **device)
            self._step_s.append(time.perf_counter() - t0)
        except Exception as exc:  # a failed step fails the rows in it; the engine keeps serving
            log.exception("decode step over %d slots failed", len(lvs))
            for lv in lvs:
                self._finish(lv, RuntimeError(f"generation failed: {exc}"))
            return
        with self._cv:
            self._rows_per_step[len(lvs)] += 1
        t1 = time.perf_counter()
        self._consume(lvs, logits)
        self._last_step_end = time.perf_counter()
        self._host_s.append(self._last_step_end - t1)

    def _consume(self, lvs: list[_Live], out) -> None:
        """Each row's next token: from the device (``DeviceOut``: sampled there) unless the row
        needs the host path, else sampled here from its logits (one row of logits per entry of
        ``lvs``); record a prompt log-probability while the prompt is fed; stream; maybe finish."""
        from .batch_ops import RowSampler

        logits = out.logits if isinstance(out, DeviceOut) else out

        sampling = []
        for i, lv in enumerate(lvs):
            if lv.forced:
                lv.prompt_entries.append(self._prompt_entries(logits[i:i + 1], [lv.forced[0]],
                                                              lv.row.prompt_logprobs)[0])
                lv.next_input = lv.forced.popleft()
            else:
                sampling.append(i)
        if not sampling:
            return
        device = isinstance(out, DeviceOut)
        host = [i for i in sampling if not device or needs_host(lvs[i])]
        tokens_of: dict[int, int] = {}
        lp_of: dict = {}
        if host:
            rows = [lvs[i].row for i in host]
            raw = logits[host].float()
            history = [(lvs[i].row.prompt_ids, lvs[i].output) for i in host]
            sampler = RowSampler(rows, len(rows), history)
            drawn = sampler.draw(raw, [lvs[i].generator for i in host])
            tokens_of.update(zip(host, drawn))
            want = [k for k, i in enumerate(host) if lvs[i].row.logprobs is not None]
            if want:  # log-softmax of the rows that asked only: the model's own distribution
                lp = raw[want].log_softmax(-1)
                lp_of.update((host[k], lp[j]) for j, k in enumerate(want))
        if device:
            on_device = out.tokens.tolist()
            tokens_of.update((i, int(on_device[i])) for i in sampling if i not in tokens_of)
        for i in sampling:
            lv, token = lvs[i], tokens_of[i]
            row = lv.row
            if lv.prompt_entries is not None:
                row.emit(PromptLogprobs(tuple(lv.prompt_entries)))
                lv.prompt_entries = None
            row.emit(logprob_entry(lp_of[i], token, row.logprobs) if i in lp_of else token)
            lv.generated += 1
            lv.output.append(token)
            lv.next_input = token
            if token in row.stop_ids or lv.generated >= row.max_new:
                self._finish(lv)

