"""The run report: markdown and one self-contained HTML page, from saved results only.

    from harness.report import render
    md_path, html_path = render("results/20261129-120000")   # writes report.md, report.html

or ``python -m harness.report RESULTS_DIR``. Reads meta.json, agent_runs.jsonl, scoreboard.json,
bench/*/summary.json and cost.json (layout: harness.results); any part may be missing and the
report says which. Files are read only if they are regular files inside the directory (no
symlink is followed, a size cap, nesting capped); anything skipped is listed in ``RunData.notes``,
in the report and on stderr. Without cost.json, costs are computed offline from the dated price snapshot
and labelled as such. Plots are matplotlib (Agg) PNGs embedded as base64, so report.html is one
file that opens anywhere without a network.
"""
from __future__ import annotations

from pathlib import Path

from harness.report.data import NotAResultsDir, RunData, load_run
from harness.results import write_text

__all__ = ["render", "load_run", "RunData", "NotAResultsDir"]


def render(results_dir: str | Path, *, notes: list[str] | None = None) -> tuple[Path, Path]:
    """Write report.md and report.html into ``results_dir``; return their paths. ``notes``, when
    given, receives one line per file or entry of the run that was skipped."""
    from harness.report.page import html_page, markdown

    run = load_run(results_dir)
    md_path, html_path = run.path / "report.md", run.path / "report.html"
    for path, text in ((md_path, markdown(run)), (html_path, html_page(run))):
        # exclusive-create temp file, no-follow, renamed over the report (harness.results):
        # a planted report.md.tmp (or report.md) symlink is never written through
        write_text(path, text)
    if notes is not None:
        notes.extend(dict.fromkeys(run.notes))
    return md_path, html_path
