"""Hostile and careless input to ``harness.run``: every bad
value is one line naming it, exit 2, before anything is measured; a dead ``--endpoint`` is
recorded and the others run; nothing measured is lost to a bad ``--json``; what a model chose as
a tool argument is stored capped."""
from __future__ import annotations

import json
import os

import boto3
import pytest

from harness.run import cli as run
from harness.agent import trial
from harness.results import read_jsonl
from tests.harness.fake_openai import SCRIPTS, FakeOpenAI, tool_then_quote
from tests.harness.servers import free_port


def _main(argv, tmp_path, **kw):
    lines: list[str] = []
    rc = run.main(argv, session=boto3.Session(region_name="us-east-1"), echo=lines.append, **kw)
    return rc, lines


def _one_line_exit_2(capsys, argv, needle, tmp_path):
    rc, lines = _main(argv, tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (argv, lines, err)
    assert len(err) == 1 and err[0].startswith("harness.run: ") and needle in err[0], err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


# --- without credentials, a bad --outputs-file is still read, and refused (it said "needs AWS
# credentials", exit 0, without ever opening it)
@pytest.mark.parametrize("make, needle", [
    (lambda p: p / "missing.json", "No such file or directory"),
    (lambda p: (p / "dir.json").mkdir() or p / "dir.json", "not a regular file"),
    (lambda p: (p / "bad.json").write_text("{not json") and p / "bad.json", "not JSON"),
    (lambda p: (p / "list.json").write_text("[1]") and p / "list.json", "expected {StackName"),
    (lambda p: (p / "bin.json").write_bytes(b"\xff\xfe{") and p / "bin.json", "not JSON"),
    (lambda p: (p / "deep.json").write_text("[" * 100000) and p / "deep.json", "not JSON"),
    (lambda p: os.mkfifo(p / "fifo.json") or p / "fifo.json", "not a regular file"),
])
def test_bad_outputs_file_without_credentials(tmp_path, capsys, no_aws, make, needle):
    path = make(tmp_path)
    _one_line_exit_2(capsys, ["--outputs-file", str(path), "--results", str(tmp_path / "results")],
                     needle, tmp_path)


@pytest.mark.parametrize("argv, needle", [
    (["--timeout", "nan"], "--timeout nan: must be a finite number"),
    (["--timeout", "inf"], "--timeout inf: must be a finite number"),
    (["--timeout", "-1"], "--timeout -1: must be a finite number"),
    (["--timeout", "0"], "--timeout 0: must be a finite number"),
    (["--rate", "nan"], "--rate levels finite and > 0"),
    (["--rate", "2,inf"], "--rate levels finite and > 0"),
    (["--endpoint", "a=http://127.0.0.1:9/v1", "--plain", "b"], "--plain 'b' names no --endpoint; valid names: a"),
    (["--endpoint", "a=http://127.0.0.1:9/v1", "--model", "b=x/y"], "--model 'b' names no --endpoint; valid names: a"),
    (["--plain", "b"], "--plain 'b' names no --endpoint; valid names: none"),
    (["--accuracy", "--accuracy-request-timeout", "inf"], "--accuracy-request-timeout inf: must be a finite number > 0"),
    (["--accuracy", "--accuracy-request-timeout", "nan"], "--accuracy-request-timeout nan: must be a finite number > 0"),
])
def test_bad_numbers_and_names(tmp_path, capsys, no_aws, argv, needle):
    _one_line_exit_2(capsys, argv + ["--results", str(tmp_path / "results")], needle, tmp_path)


@pytest.mark.parametrize("flag, make, needle", [
    ("--results", lambda p: (p / "f").write_text("x") and p / "f" / "sub", "is not a directory"),
    ("--results", lambda p: (p / "f").write_text("x") and p / "f", "exists and is not a directory"),
    ("--results", lambda p: "/proc/harness-results", "cannot create files in /proc"),
    ("--json", lambda p: (p / "f").write_text("x") and p / "f" / "out.json", "is not a directory"),
    ("--json", lambda p: p, "is a directory"),
    ("--json", lambda p: "/proc/out.json", "cannot create files in /proc"),
])
def test_unwritable_results_or_json_before_measuring(tmp_path, capsys, no_aws, flag, make, needle):
    with FakeOpenAI(SCRIPTS["good"]) as srv:
        argv = ["--endpoint", f"a={srv.base_url}", "--only", "agent", "--runs", "1", flag, str(make(tmp_path))]
        if flag == "--json":
            argv += ["--results", str(tmp_path / "results")]
        rc, lines = _main(argv, tmp_path)
        assert srv.requests == []  # nothing was measured
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"harness.run: {flag} " in err[0] and needle in err[0], err


def test_json_failing_at_the_end_keeps_the_results(tmp_path, capsys, no_aws, monkeypatch):
    """The --json target becomes unwritable while the run measures: the results directory is
    complete, the failure is one line, exit 1."""
    target = tmp_path / "late" / "out.json"
    real = run.write_file

    def write_file(path, contract, data):
        if path == target:
            raise PermissionError(13, "Permission denied", str(path))
        real(path, contract, data)

    monkeypatch.setattr(run, "write_file", write_file)
    with FakeOpenAI(SCRIPTS["good"]) as srv:
        rc, lines = _main(["--endpoint", f"a={srv.base_url}", "--only", "agent", "--runs", "1",
                           "--results", str(tmp_path / "results"), "--json", str(target)], tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--json" in err[0] and "Permission denied" in err[0], err
    run_dir = next((tmp_path / "results").iterdir())
    assert f"every result is in {run_dir}" in err[0]
    [rec] = list(read_jsonl(run_dir / "agent_runs.jsonl"))
    assert rec["ok"] and json.loads((run_dir / "meta.json").read_text())["stages"]["agent"].startswith("ok")


def test_dead_endpoint_without_model_is_recorded_and_the_others_run(tmp_path, capsys, no_aws):
    """One dead server of several, no --model: it was exit 2 "no model id ...
    pass --model" and nothing ran."""
    dead = free_port()
    with FakeOpenAI(SCRIPTS["good"]) as srv:
        rc, lines = _main(["--endpoint", f"dead=http://127.0.0.1:{dead}/v1", "--endpoint", f"good={srv.base_url}",
                           "--only", "agent", "--runs", "1", "--results", str(tmp_path / "results")], tmp_path)
    assert rc == 0, (lines, capsys.readouterr().err)
    run_dir = next((tmp_path / "results").iterdir())
    recs = {r["backend"]: r for r in read_jsonl(run_dir / "agent_runs.jsonl")}
    assert recs["good"]["ok"]
    assert recs["dead"]["unreachable"] and not recs["dead"]["ok"] and "no model id" in recs["dead"]["error"]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["access"]["dead"].startswith("unreachable: ")
    assert any(line.startswith("access     dead: unreachable") for line in lines)


def test_only_dead_endpoints_is_exit_1_with_the_record(tmp_path, capsys, no_aws):
    rc, lines = _main(["--endpoint", f"dead=http://127.0.0.1:{free_port()}/v1", "--only", "agent",
                       "--results", str(tmp_path / "results")], tmp_path)
    assert rc == 1 and any("no endpoint reachable" in line for line in lines), lines
    run_dir = next((tmp_path / "results").iterdir())
    assert [r["backend"] for r in read_jsonl(run_dir / "agent_runs.jsonl")] == ["dead"]


def test_tool_arguments_are_stored_capped(tmp_path, no_aws):
    """A model that sends a 100 kB filter (the fake server streams it 7 characters a chunk, so
    not 20 MB): the run is recorded, its stored argument is a marker of truncation with the head
    and the full length (it was stored whole, several times over)."""
    huge = "id >= 10 " + "x" * 100_000
    with FakeOpenAI(tool_then_quote(json.dumps({"filters": [huge]}))) as srv:
        rc, lines = _main(["--endpoint", f"a={srv.base_url}", "--only", "agent", "--runs", "1",
                           "--results", str(tmp_path / "results"), "--json", str(tmp_path / "out.json")],
                          tmp_path)
    assert rc == 0
    run_dir = next((tmp_path / "results").iterdir())
    size = (run_dir / "agent_runs.jsonl").stat().st_size
    assert size < 8 * trial.ARG_CAP + 4096, size
    [rec] = list(read_jsonl(run_dir / "agent_runs.jsonl"))
    [call] = rec["tool_calls"]
    assert call["input"]["truncated"] is True and call["input"]["chars"] > 100_000
    assert call["input"]["head"].startswith('{"filters": ["id >= 10 xxx')
    assert all(len(json.dumps(r)) < 3 * trial.ARG_CAP for r in rec["tool_results"])  # filters + error
    assert (tmp_path / "out.json").stat().st_size < 8 * trial.ARG_CAP + 4096
    assert all(len(line) < 1000 for line in lines)


def test_capped_keeps_small_values_and_marks_big_ones():
    assert trial.capped(["id >= 10"]) == ["id >= 10"]
    assert trial.capped("abc", 2) == "ab…[truncated: 3 chars]"
    big = trial.capped({"k": "v" * 100}, 10)
    assert big == {"truncated": True, "chars": len(json.dumps({"k": "v" * 100})), "head": '{"k": "vvv'}
