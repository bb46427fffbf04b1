"""python -m harness.report RESULTS_DIR: write report.md and report.html into RESULTS_DIR.

Exit 0: written from every file of the run; 1: written, but a file or entry was skipped (each
one line on stderr and in the report's skipped list), or the report could not be written; 2: not
a results directory."""
from __future__ import annotations

import sys

from harness.report import render
from kit.cli import one_line_errors


def _prog() -> str:
    # "python -m harness report" when reached through the one door (harness/__main__.py)
    return sys.argv[0] if sys.argv[0].startswith("python -m harness ") else "python -m harness.report"


@one_line_errors("harness.report")
def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = f"usage: {_prog()} RESULTS_DIR (a results/<run-id>/ directory)"
    if args in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    notes: list[str] = []
    try:  # not a results directory: NotAResultsDir, one line and exit 2 at the door
        md, page = render(args[0], notes=notes)
    except OSError as e:  # e.g. a read-only results directory
        print(f"harness.report: cannot write the report into {args[0]}: {e.strerror or e}", file=sys.stderr)
        return 1
    for note in notes:  # files or entries of the run that were skipped, one line each
        print(f"harness.report: {note}", file=sys.stderr)
    print(f"wrote {md} and {page}")
    return 1 if notes else 0  # written, but without what was skipped: a script must see it


if __name__ == "__main__":
    raise SystemExit(main())
