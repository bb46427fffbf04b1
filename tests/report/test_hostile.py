"""Hostile results directories against ``python -m harness.report``.

A results directory may come from someone else. Each row plants one thing in a full synthetic
run: symlinks where the report writes its temp files or reads its inputs, a FIFO, /dev/zero,
JSON nested 1,000 deep, a non-UTF-8 or non-object line, wrong-typed entries, a bench directory
named with '$'. What must hold for every row: the report is written (exit 0, no traceback),
only report.md and report.html are added to the directory and both are regular files, nothing
outside the directory is written or read into the report, and the skipped file is named on
stderr and in the report. The rows that could hang (FIFO, /dev/zero) run in a subprocess with a
timeout; the rest run ``main`` in-process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.__main__ import main
from tests.report.synthetic import make_results

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET-OUTSIDE-THE-RUN"


def _outside(tmp_path: Path) -> Path:
    """A directory next to the run: a victim file to overwrite and a foreign meta/summary."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "victim.txt").write_text("do not touch\n")
    (out / "meta.json").write_text(json.dumps({"run_id": SECRET, "region": SECRET}))
    (out / "bench" / SECRET).mkdir(parents=True)
    (out / "bench" / SECRET / "summary.json").write_text(json.dumps(
        [{"concurrency": 1, "completed": 1, "failed": 1, "errors": {SECRET: 1}, "output_tok_s": 1.0}]))
    return out


def _deep(n: int) -> str:
    return '{"run_id": "deep", "config": ' + "[" * n + "]" * n + "}"


def plant_md_tmp(run, out):
    os.symlink(out / "victim.txt", run / "report.md.tmp")


def plant_html_tmp(run, out):
    os.symlink(out / "victim.txt", run / "report.html.tmp")


def plant_report_md(run, out):
    os.symlink(out / "victim.txt", run / "report.md")


def meta_symlink_outside(run, out):
    (run / "meta.json").unlink()
    os.symlink(out / "meta.json", run / "meta.json")


def bench_dir_symlink_outside(run, out):
    os.symlink(out / "bench" / SECRET, run / "bench" / "foreign")


def bench_symlink_outside(run, out):
    os.rename(run / "bench", run / "bench-real")
    os.symlink(out / "bench", run / "bench")


def summary_symlink_outside(run, out):
    (run / "bench" / "g6" / "summary.json").unlink()
    os.symlink(out / "bench" / SECRET / "summary.json", run / "bench" / "g6" / "summary.json")


def meta_dev_zero(run, out):
    (run / "meta.json").unlink()
    os.symlink("/dev/zero", run / "meta.json")


def meta_fifo(run, out):
    (run / "meta.json").unlink()
    os.mkfifo(run / "meta.json")


def meta_nested_1000(run, out):
    (run / "meta.json").write_text(_deep(1000))


def meta_nested_100(run, out):  # parses, but past the report's 64-level cap
    (run / "meta.json").write_text(_deep(100))


def agent_not_utf8(run, out):
    with open(run / "agent_runs.jsonl", "ab") as f:
        f.write(b'{"backend": "g6", "ok": true, "error": "\xff\xfe"}\n')


def agent_not_object(run, out):
    with open(run / "agent_runs.jsonl", "ab") as f:
        f.write(b'[1, 2]\n5\n"text"\n')


def agent_backend_list(run, out):
    with open(run / "agent_runs.jsonl", "ab") as f:
        f.write(json.dumps({"backend": ["g6", "x"], "ok": True}).encode() + b"\n")
        f.write(json.dumps({"backend": {"a": 1}, "ok": True}).encode() + b"\n")


def cost_wrong_types(run, out):
    (run / "cost.json").write_text(json.dumps({
        "price_notes": "not a list", "input_per_output": "five",
        "endpoints": {"g6": {"usd_per_hour": "abc", "usd_per_m_output_c16": [1], "measured": 5,
                             "roofline": [], "price": "x", "missing": 3, "instance_type": {"a": 1},
                             "break_even_tok_s": True, "efficiency": "high"},
                      "sagemaker": {"measured": {"decode_tok_s": "fast"}, "roofline": {"warnings": 7},
                                    "price": {"label": ["l"]}, "usd_per_m_output_single": None},
                      "bedrock": 7}}))


def summary_errors_wrong(run, out):
    levels = json.loads((run / "bench" / "g6" / "summary.json").read_text())
    levels[0]["errors"] = ["timeout", 3]
    levels[1]["errors"] = {"timeout": "many"}
    levels[2]["completed"] = 1.5
    levels[2]["ttft_ms"] = [1, 2]
    (run / "bench" / "g6" / "summary.json").write_text(json.dumps(levels))


def bench_dollar_name(run, out):
    for name in ("a$b$", "x$\\frac{$", "$"):
        (run / "bench" / name).mkdir()
        (run / "bench" / name / "summary.json").write_text(
            (run / "bench" / "g6" / "summary.json").read_text())


# name -> (plant, what stderr must name, must the row run in a subprocess)
ROWS = {
    "report.md.tmp symlink": (plant_md_tmp, None, False),
    "report.html.tmp symlink": (plant_html_tmp, None, False),
    "report.md symlink": (plant_report_md, None, False),
    "meta.json symlink outside": (meta_symlink_outside, "meta.json: skipped (a symbolic link", False),
    "bench/NAME symlink outside": (bench_dir_symlink_outside, "a symbolic link: not followed", False),
    "bench symlink outside": (bench_symlink_outside, "bench: skipped (a symbolic link", False),
    "summary.json symlink outside": (summary_symlink_outside, "summary.json: skipped (a symbolic link", False),
    "meta.json -> /dev/zero": (meta_dev_zero, "meta.json: skipped (a symbolic link", True),
    "meta.json FIFO": (meta_fifo, "meta.json: skipped (not a regular file)", True),
    "meta.json nested 1000": (meta_nested_1000, "nested deeper than 64", False),
    "meta.json nested 100": (meta_nested_100, "nested deeper than 64", False),
    "agent_runs non-UTF-8": (agent_not_utf8, "1 not UTF-8", False),
    "agent_runs non-object": (agent_not_object, "3 not a JSON object", False),
    "agent_runs backend list": (agent_backend_list, "2 records skipped (backend not a string or None)", False),
    "cost.json wrong types": (cost_wrong_types, "cost.json: wrong-typed entries ignored", False),
    "summary errors wrong types": (summary_errors_wrong, "wrong-typed level fields ignored", False),
    "bench named with $": (bench_dollar_name, None, False),
}


def _run_report(run: Path, subprocess_: bool, capsys) -> tuple[int, str]:
    if subprocess_:
        p = subprocess.run([sys.executable, "-m", "harness.report", str(run)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        return p.returncode, p.stderr
    rc = main([str(run)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("row", list(ROWS))
def test_hostile_results_dir_renders_and_writes_or_reads_nothing_outside(tmp_path, capsys, row):
    plant, needle, in_subprocess = ROWS[row]
    run = make_results(tmp_path)
    out = _outside(tmp_path)
    plant(run, out)
    before = {p.name for p in run.iterdir()}
    outside_before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    rc, err = _run_report(run, in_subprocess, capsys)
    assert "Traceback" not in err, err
    assert rc == (1 if err else 0), err  # written; 1 when something was skipped, each said on stderr
    md, page = run / "report.md", run / "report.html"
    assert md.is_file() and not md.is_symlink() and page.is_file() and not page.is_symlink()
    # only the two reports were added (no temp file left behind); planted entries stay as they were
    assert {p.name for p in run.iterdir()} == before | {"report.md", "report.html"}
    # nothing outside the run was written...
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == outside_before
    # ... or read into the report
    text, html = md.read_text(), page.read_text()
    assert SECRET not in text and SECRET not in html
    if needle:
        assert needle in err, err
        assert needle in text.replace("\\", ""), text[:2000]
    assert "Latency against throughput" in text and "not rendered" not in text


def test_bench_named_with_dollars_is_plotted_as_written(tmp_path, capsys):
    run = make_results(tmp_path)
    bench_dollar_name(run, None)
    assert main([str(run)]) == 0
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3  # the latency plot was drawn
    assert "| a$b$ | c=1 |" in (run / "report.md").read_text()


def test_a_clean_run_has_no_skipped_list(tmp_path, capsys):
    run = make_results(tmp_path)
    assert main([str(run)]) == 0
    assert capsys.readouterr().err == ""
    assert "Skipped while reading" not in (run / "report.md").read_text()


def test_mkstemp_creates_exclusively_without_following_a_symlink():
    """The fact write_text relies on: CPython's tempfile opens with O_EXCL | O_NOFOLLOW
    (Lib/tempfile.py, _bin_openflags)."""
    import tempfile

    assert tempfile._bin_openflags & os.O_EXCL and tempfile._bin_openflags & os.O_NOFOLLOW
    assert tempfile._bin_openflags & os.O_CREAT
