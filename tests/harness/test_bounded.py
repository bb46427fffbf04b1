"""run_bounded: the agent call's time limit, and a Ctrl-C that lands as the call finishes is
still a KeyboardInterrupt (Python 3.11's wait_for swallowed it: python/cpython#86296)."""
from __future__ import annotations

import asyncio
import signal

import pytest

from harness.agent.bounded import run_bounded


async def _answer_then_ctrl_c() -> str:
    await asyncio.sleep(0)
    signal.raise_signal(signal.SIGINT)  # Ctrl-C in the very step the answer completes
    return "answer"


def test_ctrl_c_as_the_call_finishes_is_not_lost():
    with pytest.raises(KeyboardInterrupt):
        run_bounded(_answer_then_ctrl_c(), 5)


def test_the_race_is_real_with_wait_for_on_this_python():
    """The control: the same Ctrl-C through asyncio.run(wait_for(...)) is lost on 3.11 (fixed
    in 3.12, where wait_for is built on asyncio.timeout)."""
    import sys

    if sys.version_info >= (3, 12):
        pytest.skip("wait_for is built on asyncio.timeout from 3.12 on")
    assert asyncio.run(asyncio.wait_for(_answer_then_ctrl_c(), 5)) == "answer"


def test_time_limit_and_result():
    assert run_bounded(asyncio.sleep(0, result=7), 5) == 7
    with pytest.raises(TimeoutError):
        run_bounded(asyncio.sleep(10), 0.05)
