"""One agent call with a time limit that never loses a Ctrl-C.

``asyncio.run(asyncio.wait_for(call, t))`` loses a Ctrl-C that lands as the call finishes on
Python 3.11: asyncio.run's SIGINT handler cancels the main task, and 3.11's ``wait_for``, woken by
that cancellation with its inner task already done, returns the result instead of re-raising
(python/cpython#86296, "AsyncIO's wait_for can hide cancellation in a rare race condition";
3.12 re-implemented wait_for on ``asyncio.timeout``, python/cpython#98518). No KeyboardInterrupt
follows and ``harness.run`` went on to its next run: seen once in ~25 Ctrl-Cs on the loaded test
machine and made deterministic in tests/harness/test_bounded.py. ``asyncio.timeout`` runs the call
in the main task itself, so that cancellation always ends the run.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable


def run_bounded(call: Awaitable[Any], timeout: float) -> Any:
    """``asyncio.run`` of ``call`` with ``timeout`` seconds (TimeoutError); Ctrl-C is
    KeyboardInterrupt however it lands."""
    async def bounded() -> Any:
        async with asyncio.timeout(timeout):
            return await call

    return asyncio.run(bounded())
