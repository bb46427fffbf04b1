"""Argument types the calibration scripts share: a bad value is one line naming it and what would
be valid, exit 2, never the usage block (the scripts parse with kit/cli.py OneLineParser, their
mains behind its door)."""
from __future__ import annotations

import argparse
from typing import Callable


def positive_ints(text: str) -> list[int]:
    """``1,16,64`` -> [1, 16, 64]; anything else is refused."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 1,16,64") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be a positive integer")
    return values


def positive(kind: type) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a positive {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
        return value
    return parse
