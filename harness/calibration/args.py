"""Command-line pieces the calibration scripts share: a bad value is one line naming it and
what would be valid, exit 2, never the usage block."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


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
