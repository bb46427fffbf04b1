"""kit/cli.py, the command door: a bad option is one line and exit 2 (never argparse's usage
block), a KitError escaping main() is one line with its own exit code, and anything else is not
swallowed."""
from __future__ import annotations

import pytest

from kit.cli import OneLineParser, one_line_errors, run_command
from kit.errors import KitError, UsageError


class Exists(KitError):
    exit_code = 1


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m thing")
    p.add_argument("--n", type=int, default=1)
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("go").add_argument("--speed", choices=["slow", "fast"])
    return p


@one_line_errors("thing")
def _main(argv=None, *, boom: BaseException | None = None) -> int:
    a = _parser().parse_args(argv)
    if boom is not None:
        raise boom
    return a.n


@pytest.mark.parametrize("argv, words", [
    (["--n", "x"], "argument --n: invalid int value: 'x'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["go", "--speed", "warp"], "argument --speed: invalid choice: 'warp'"),  # a subparser is one too
])
def test_a_bad_option_is_one_line_exit_2(argv, words, capsys):
    assert _main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"thing: {words}") and "(see --help)" in err
    assert "usage:" not in err


def test_the_parser_alone_raises_usage_error():
    with pytest.raises(UsageError, match="invalid int value"):
        _parser().parse_args(["--n", "x"])


def test_help_still_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        _main(["--help"])
    assert e.value.code == 0 and "usage: python -m thing" in capsys.readouterr().out


def test_a_kit_error_is_its_exit_code_and_one_line(capsys):
    assert _main([], boom=Exists("G6Stack exists\n  and bills")) == 1
    assert capsys.readouterr().err == "thing: G6Stack exists; and bills\n"
    assert _main(["--n", "7"]) == 7


def test_other_exceptions_pass_through():
    with pytest.raises(ZeroDivisionError):
        _main([], boom=ZeroDivisionError("a bug is a traceback"))
    with pytest.raises(KeyboardInterrupt):
        _main([], boom=KeyboardInterrupt())


def test_run_command_wraps_an_undecorated_main(capsys):
    def bare(argv, **kw):
        raise UsageError(f"--x {argv[0]!r}: give a number")

    assert run_command(bare, ["y"], "python -m harness x") == 2
    assert capsys.readouterr().err == "python -m harness x: --x 'y': give a number\n"
    assert run_command(lambda argv: None, [], "p") == 0
