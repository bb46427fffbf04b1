"""PyTorch's CUDA caching allocator, as far as ``torch.cuda.memory_allocated()`` sees it.

vLLM reports "Model loading took X GiB memory" from ``torch.cuda.max_memory_allocated()`` after a
peak reset (vLLM 0.30.0 ``platforms/cuda.py`` ``get_current_memory_usage``, used by
``utils/mem_utils.py`` ``DeviceMemoryProfiler``). That statistic counts *blocks*, not requests: a
tensor placed in a cached free block that may not be split counts the whole block
(``alloc_found_block`` adds ``block->size`` to ``allocated_bytes``). This module replays the rules
that decide a block's size (PyTorch ``c10/cuda/CUDACachingAllocator.cpp``, read at pytorch/pytorch
commit 001074d2, a stored main-branch version, not the 2.13.0 that vLLM 0.30.0 pins; later versions
name the 20 MiB below ``max_non_split_rounding_size`` and default it to ``kLargeBuffer``):

- sizes round up to 512 B (``kMinBlockSize``, ``round_size``); requests up to 1 MiB
  (``kSmallSize``) use the small pool, larger ones the large pool;
- a request takes the smallest cached free block that fits (``get_free_block``), except that a
  request below ``max_split_size`` never takes a block of ``max_split_size`` or more, and a
  request of ``max_split_size`` or more only takes one less than 20 MiB larger;
- with no such block a new segment is reserved (``get_allocation_size``): 2 MiB for the small
  pool, 20 MiB for requests under 10 MiB, else the request rounded up to 2 MiB;
- the block is split (``should_split``) only if the rest is at least 512 B (small pool) or, in the
  large pool, the request is below ``max_split_size`` and the rest is more than 1 MiB; an
  unsplit rest stays part of the allocated block;
- a freed block merges with free neighbours of its segment (``free_block``).

Streams, events, expandable segments and out-of-memory retries are not modelled: a model load
runs on one stream and vLLM 0.30.0 does not turn expandable segments on.
"""
from __future__ import annotations

import bisect
import itertools

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(n: int) -> int:
    return max(MIN_BLOCK, -(-n // MIN_BLOCK) * MIN_BLOCK)


class _Block:
    __slots__ = ("addr", "size", "small", "free", "prev", "next")

    def __init__(self, addr: int, size: int, small: bool):
        self.addr, self.size, self.small = addr, size, small
        self.free, self.prev, self.next = True, None, None


class CachingAllocator:
    """``max_split_size``: None for PyTorch's default (no limit), else bytes."""

    def __init__(self, max_split_size: int | None = None):
        self.max_split = max_split_size if max_split_size is not None else float("inf")
        self._free = {True: [], False: []}  # pool -> sorted (size, addr, block)
        self._addr = itertools.count(1 << 40, 1 << 36)  # distinct, ascending segment addresses
        self.allocated = 0  # what torch.cuda.memory_allocated() reports
        self.reserved = 0  # segments taken from the device (torch.cuda.memory_reserved())

    def _insert(self, b: _Block) -> None:
        bisect.insort(self._free[b.small], (b.size, b.addr, b))

    def _remove(self, b: _Block) -> None:
        pool = self._free[b.small]
        del pool[bisect.bisect_left(pool, (b.size, b.addr))]

    def malloc(self, n: int) -> _Block | None:
        if n == 0:
            return None  # an empty tensor takes no block
        size = round_size(n)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        block = pool[i][2] if i < len(pool) else None
        if block is not None and (
            (size < self.max_split <= block.size)
            or (size >= self.max_split and block.size >= size + LARGE_BUFFER)
        ):
            block = None
        if block is None:
            seg = SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC else (
                -(-size // ROUND_LARGE) * ROUND_LARGE)
            block = _Block(next(self._addr), seg, small)
            self.reserved += seg
        else:
            pool.pop(i)
        rest = block.size - size
        if rest >= MIN_BLOCK if small else (size < self.max_split and rest > SMALL_SIZE):
            tail = _Block(block.addr + size, rest, small)
            tail.prev, tail.next = block, block.next
            if block.next:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._insert(tail)
        block.free = False
        self.allocated += block.size
        return block

    def free(self, b: _Block | None) -> None:
        if b is None:
            return
        self.allocated -= b.size
        b.free = True
        prev, nxt = b.prev, b.next
        if prev is not None and prev.free:
            self._remove(prev)
            prev.size += b.size
            prev.next = nxt
            if nxt:
                nxt.prev = prev
            b = prev
        if nxt is not None and nxt.free:
            self._remove(nxt)
            b.size += nxt.size
            b.next = nxt.next
            if nxt.next:
                nxt.next.prev = b
        self._insert(b)
