"""The report checks the ranges it renders: a hand-edited accuracy.json (an accuracy of 57, which
read 5700%; n -3; an interval outside 0 to 1; a p-value of 1.5) leaves that entry out, names the
file and the value in the skipped list and on stderr, and the exit status is 1; a whole file
renders as before, exit 0."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.__main__ import main
from harness.results import write_json
from tests.report.synthetic import make_results

ROOT = Path(__file__).resolve().parents[2]


def _backend(**kw) -> dict:
    return {"n": 500, "correct": 300, "accuracy": 0.6, "ci95": [0.55, 0.64], "complete": True, **kw}


def _pair(**kw) -> dict:
    return {"a": "a", "b": "b", "n": 500, "both": 250, "a_only": 50, "b_only": 40, "neither": 160, "diff": 0.02,
            "ci95": [-0.01, 0.05], "p_mcnemar": 0.4, "min_detectable_diff": 0.05, **kw}


def _write(run: Path, backends: dict, pairs: list) -> None:
    write_json(run / "accuracy" / "accuracy.json", {"schema_version": 2, "backends": backends, "pairs": pairs})
    write_json(run / "accuracy" / "run.json", {"backends": {n: {"label": n, "status": "complete"} for n in backends}})


BAD_BACKEND = {
    "accuracy 57": ({"accuracy": 57}, "accuracy=57 is outside 0 to 1", "5700"),
    "accuracy -0.1": ({"accuracy": -0.1}, "accuracy=-0.1 is outside 0 to 1", "-10.0%"),
    "accuracy NaN": ({"accuracy": float("nan")}, "wrong-typed entries ignored: backends.a.accuracy", "nan%"),
    "n -3": ({"n": -3}, "n=-3 is not a whole number >= 0", "| -3 |"),
    "n 1.5": ({"n": 1.5}, "wrong-typed entries ignored: backends.a.n", "| 1.5 |"),  # the contract's check
    "correct -1": ({"correct": -1}, "correct=-1 is not a whole number >= 0", None),
    "ci95 reversed": ({"ci95": [0.64, 0.55]}, "ci95=[0.64, 0.55] is not an interval within 0 to 1", "64.0 – 55.0"),
    "ci95 past 1": ({"ci95": [0.5, 3]}, "ci95=[0.5, 3] is not an interval", "300.0"),
    "ci95 three ends": ({"ci95": [0.1, 0.2, 0.3]}, "is not an interval", None),
}
BAD_PAIR = {
    "diff 3": ({"diff": 3}, "diff=3 is outside -1 to 1", "+300.0"),
    "ci95 past -1": ({"ci95": [-2, 0.1]}, "ci95=[-2, 0.1] is not an interval within -1 to 1", "-200.0"),
    "p 1.5": ({"p_mcnemar": 1.5}, "p_mcnemar=1.5 is outside 0 to 1", "| 1.5 |"),
    "both -2": ({"both": -2}, "both=-2 is not a whole number >= 0", "-2 /"),
    "detectable -0.2": ({"min_detectable_diff": -0.2}, "min_detectable_diff=-0.2 is outside 0 to 1", "-20.0"),
}


def _report(run: Path, capsys) -> tuple[int, str, str]:
    rc = main([str(run)])
    return rc, capsys.readouterr().err, (run / "report.md").read_text()


@pytest.mark.parametrize("case", list(BAD_BACKEND))
def test_a_backend_out_of_range_is_left_out_and_named(case, tmp_path, capsys):
    change, words, shown = BAD_BACKEND[case]
    run = make_results(tmp_path, parts=("meta",))
    _write(run, {"a": _backend(**change), "b": _backend()}, [])
    rc, err, md = _report(run, capsys)
    path = run / "accuracy" / "accuracy.json"
    assert rc == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"harness.report: {path}: ") and words in err, err
    assert f"{path}: " in md and words in md.replace("\\", "")  # the skipped list names the file
    if shown:
        assert shown not in md
    assert "| b |" in md or "| b " in md  # the whole entry is still there


@pytest.mark.parametrize("case", list(BAD_PAIR))
def test_a_pair_out_of_range_is_left_out_and_named(case, tmp_path, capsys):
    change, words, shown = BAD_PAIR[case]
    run = make_results(tmp_path, parts=("meta",))
    _write(run, {"a": _backend(), "b": _backend()}, [_pair(**change)])
    rc, err, md = _report(run, capsys)
    assert rc == 1 and err.count("\n") == 1 and f"pair a - b: {words}" in err, err
    assert shown not in md


def test_the_issues_case_from_the_command_line(tmp_path):
    """accuracy.json edited to accuracy 57 and n -3: one line naming the file, exit 1, no 5700%."""
    run = make_results(tmp_path, parts=("meta",))
    _write(run, {"a": _backend(accuracy=57, n=-3)}, [])
    p = subprocess.run([sys.executable, "-m", "harness", "report", str(run)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert str(run / "accuracy" / "accuracy.json") in p.stderr
    assert "5700" not in (run / "report.md").read_text()


def test_a_whole_accuracy_json_renders_with_exit_0(tmp_path, capsys):
    run = make_results(tmp_path, parts=("meta",))
    _write(run, {"a": _backend(), "b": _backend(accuracy=1.0, ci95=[0.99, 1.0])}, [_pair(), _pair(a="b", b="a")])
    rc, err, md = _report(run, capsys)
    assert rc == 0 and err == "", err
    assert "60.0%" in md and "100.0%" in md and "+2.0" in md
    assert "Skipped while reading" not in md


def test_a_damaged_accuracy_json_is_in_the_skipped_list(tmp_path, capsys):
    run = make_results(tmp_path, parts=("meta",))
    (run / "accuracy").mkdir()
    (run / "accuracy" / "accuracy.json").write_text(json.dumps([1, 2]))
    rc, err, md = _report(run, capsys)
    assert rc == 1 and str(run / "accuracy" / "accuracy.json") in err and "accuracy.json" in md
