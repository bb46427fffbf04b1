"""The command door: the one argparse parser of the kit's commands, and the one place a
``KitError`` escaping a command's ``main()`` becomes one line on stderr and its exit code.

    from kit.cli import OneLineParser, one_line_errors

    @one_line_errors("harness.bench")
    def main(argv=None) -> int:
        a = OneLineParser(prog="python -m harness.bench").parse_args(argv)
        ...
        raise UsageError("--rate -2: must be > 0")  # -> "harness.bench: --rate -2: must be > 0", exit 2

``OneLineParser`` reports a bad option as a ``UsageError`` (never argparse's usage block and
exit), so a command's ``main()`` called in-process returns 2 like its process exits 2, and every
message goes through the same door. A command reached through ``python -m harness CMD``
(harness/__main__.py) passes the door the same way.

Standard library only (kit/ imports neither the CDK nor boto3).
"""
from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, Callable, NoReturn

from kit.errors import KitError, UsageError

Main = Callable[..., "int | None"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad option as one line: ``error()`` raises ``UsageError`` with argparse's
    message, which the door prints as ``<prog>: <message> (see --help)``, exit 2. Subparsers
    (``add_subparsers``) are of this class too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see --help)")


def one_line(e: BaseException) -> str:
    """``str(e)`` on one line (a message that spans lines is joined with "; ")."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return "; ".join(lines) or type(e).__name__


def run_command(main: Main, argv: list[str] | None = None, prog: str = "", **kwargs: Any) -> int:
    """``main(argv, **kwargs)``'s exit code; a ``KitError`` escaping it is printed as
    ``<prog>: <message>`` on stderr and its ``exit_code`` returned."""
    try:
        return int(main(argv, **kwargs) or 0)
    except KitError as e:
        print(f"{prog}: {one_line(e)}" if prog else one_line(e), file=sys.stderr)
        return e.exit_code


def one_line_errors(prog: str) -> Callable[[Main], Callable[..., int]]:
    """Decorator: ``main`` behind the door (``run_command``) under ``prog``, the name its one-line
    messages start with. Keyword arguments (tests' seams) pass through."""

    def wrap(main: Main) -> Callable[..., int]:
        @functools.wraps(main)
        def door(argv: list[str] | None = None, **kwargs: Any) -> int:
            return run_command(main, argv, prog, **kwargs)

        door.prog = prog  # type: ignore[attr-defined]
        return door

    return wrap


def generated_docs_command(prog: str, description: str, *, root: Any, stale: Callable[[Any], list[str]],
                           write: Callable[[Any], list[str]], agrees: str,
                           show: Callable[[], str]) -> Callable[..., int]:
    """The ``main`` of a generator of docs tables (``make docs``): ``--check`` exits 1 listing what
    is stale (``stale(root)``), ``--write`` rewrites (``write(root)`` -> the files changed), neither
    prints what it would write (``show()``). ``root``: the repository checked by default."""

    @one_line_errors(prog)
    def main(argv: list[str] | None = None) -> int:
        from pathlib import Path

        p = OneLineParser(prog=f"python -m {prog}", description=description)
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--write", action="store_true", help="rewrite the tables in place")
        mode.add_argument("--check", action="store_true", help="exit 1 when a file's table is out of date")
        p.add_argument("--root", type=Path, default=root, help="repository root (default: this checkout)")
        a = p.parse_args(sys.argv[1:] if argv is None else argv)
        try:
            if a.check:
                problems = stale(a.root)
                print("\n".join(problems) or agrees, file=sys.stderr if problems else sys.stdout)
                return 1 if problems else 0
            if a.write:
                changed = write(a.root)
                print(f"rewrote {', '.join(changed)}" if changed else "nothing to rewrite")
                return 0
        except OSError as e:  # a --root without the files: one line, not a traceback
            raise UsageError(str(e)) from None
        print(show())
        return 0

    return main
