"""python -m harness.bench.summarize on a results directory of garbage: lines that are not JSON,
not objects, records whose fields are of the wrong type (every field the metrics read, every kind
of wrong value), with and without good records beside them. Never a traceback: with good records
the summary is theirs and the exit is 1 with one line naming the file and what was left out;
without, one line, exit 1, and the summary already there is left as it was."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench import summarize

ROOT = Path(__file__).resolve().parents[2]


def _good(i: int, level_run: str = "run-1") -> dict:
    sent = 1_000_000_000 + i * 10_000_000
    return {"schema_version": 1, "id": f"r{i}", "concurrency": 1, "profile": "agent", "warmup": False,
            "ok": True, "error": None, "http_status": 200, "finish_reason": "stop", "retries": 0,
            "retry_wait_ms": 0.0, "wall_sent": 1_700_000_000.0 + i, "t_scheduled_ns": sent - 1000,
            "t_sent_ns": sent, "t_end_ns": sent + 50_000_000, "prompt_tokens": 20, "output_tokens": 4,
            "output_tokens_source": "usage", "chunk_tokens_source": "usage",
            "chunk_us": [10_000, 20_000, 30_000, 40_000], "chunk_tokens": [1, 1, 1, 1], "level_run": level_run}


FIELDS = [k for k in _good(0) if k != "schema_version"]
WRONG = {"a string": "x", "a list": ["x"], "an object": {"a": 1}, "nested lists": [[1]], "null": None,
         "true": True, "negative": -5, "huge int": 10 ** 400, "a float": 1e308, "zero": 0}
LINES = {"not JSON": b"garbage", "a list": b"[1, 2]", "a number": b"7", "not UTF-8": b"\xff\xfe\xfd",
         "nested deep": b"[" * 100_000 + b"]" * 100_000, "NaN": b'{"concurrency": NaN}',
         "empty object": b"{}", "torn": b'{"id": "r9", "concurrency": 1, "ok": tr'}


def _run(d: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.bench.summarize", str(d)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _call(d: Path, capsys) -> tuple[int, str]:
    rc = summarize.main([str(d)])
    return rc, capsys.readouterr().err


def _write(d: Path, lines: list[bytes]) -> None:
    d.mkdir(exist_ok=True)
    (d / "requests.jsonl").write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("with_good", [False, True])
@pytest.mark.parametrize("field", FIELDS)
def test_every_field_wrong_in_every_way_is_no_traceback(field, with_good, tmp_path, capsys):
    good = [json.dumps(_good(i)).encode() for i in range(3)] if with_good else []
    bad = [json.dumps({**_good(10 + j), field: v}).encode() for j, v in enumerate(WRONG.values())]
    _write(tmp_path / "b", good + bad)
    rc, err = _call(tmp_path / "b", capsys)
    assert rc in (0, 1) and "Traceback" not in err
    assert err.count("\n") <= 1, err  # one file: at most one line
    summary = tmp_path / "b" / "summary.json"
    if with_good:
        assert summary.exists()
        levels = json.loads(summary.read_text())["levels"]
        assert sum(lv["completed"] + lv["failed"] for lv in levels) >= 3
    else:
        assert rc == 1 or summary.exists()


@pytest.mark.parametrize("with_good", [False, True])
@pytest.mark.parametrize("kind", list(LINES))
def test_lines_that_are_not_records(kind, with_good, tmp_path, capsys):
    good = [json.dumps(_good(i)).encode() for i in range(3)] if with_good else []
    _write(tmp_path / "b", good + [LINES[kind]] * 2)
    if not with_good:  # a summary from an earlier run is kept, not replaced by an empty one
        (tmp_path / "b" / "summary.json").write_text('{"schema_version": 1, "levels": []}\n')
    rc, err = _call(tmp_path / "b", capsys)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(tmp_path / "b" / "requests.jsonl") in err
    if with_good:
        levels = json.loads((tmp_path / "b" / "summary.json").read_text())["levels"]
        assert [lv["completed"] for lv in levels] == [3]
    else:
        assert err.startswith(f"harness.bench.summarize: no usable request record in {tmp_path / 'b'}")
        assert (tmp_path / "b" / "summary.json").read_text() == '{"schema_version": 1, "levels": []}\n'


def test_the_issues_two_cases_from_the_command_line(tmp_path):
    """Garbage lines with and without good ones, as a user runs it: one line, exit 1."""
    _write(tmp_path / "garbage", [b"garbage", b'{"x": 1}', b"[1]", b'{"schema_version": 1, "concurrency": "a"}'])
    _write(tmp_path / "mixed", [json.dumps(_good(0)).encode(), b"garbage", b'{"concurrency": "a"}'])
    for name in ("garbage", "mixed"):
        p = _run(tmp_path / name)
        assert p.returncode == 1 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "garbage" / "summary.json").exists()
    assert json.loads((tmp_path / "mixed" / "summary.json").read_text())["levels"][0]["completed"] == 1


def test_clean_records_exit_0(tmp_path, capsys):
    _write(tmp_path / "b", [json.dumps(_good(i)).encode() for i in range(3)])
    rc, err = _call(tmp_path / "b", capsys)
    assert rc == 0 and err == ""
