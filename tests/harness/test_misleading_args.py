"""Arguments that were silently ignored or misleading: each is now one line
naming the value and what would be valid, and a non-zero exit when the command cannot do what it
was asked; nothing is measured or written first.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from harness.run import cli as run
from harness.accuracy.cli import main as accuracy_main

REPO = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9/v1"


def _run(argv, tmp_path):
    lines: list[str] = []
    rc = run.main(argv + ["--results", str(tmp_path / "results")],
                  session=boto3.Session(region_name="us-east-1"), echo=lines.append)
    return rc, lines


def _one_line(capsys, rc, want_rc, needle) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == want_rc, (rc, err)
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err
    return err[0]


# -- harness.run: an option of a stage that does not run -------------------------------------------
STAGE_OPTIONS = [
    (["--accuracy-items", "FILE"], "--accuracy-items"),
    (["--accuracy-tasks", "gsm8k"], "--accuracy-tasks"),
    (["--accuracy-limit", "5"], "--accuracy-limit"),
    (["--accuracy-request-timeout", "9"], "--accuracy-request-timeout"),
    (["--accuracy-it", "FILE"], "--accuracy-items"),  # argparse's abbreviation counts too
    (["--only", "agent", "--bench-requests", "9"], "--bench-requests"),
    (["--only", "agent", "--concurrency", "1,2"], "--concurrency"),
    (["--only", "agent", "--slo", "ttft_p99_ms=500"], "--slo"),
    (["--only", "agent", "--bench-profile", "2k-512"], "--bench-profile"),
    # harness.bench's names for the same options (one name per concept), named as typed
    (["--only", "agent", "--requests", "9"], "--requests"),
    (["--only", "agent", "--profile", "2k-512"], "--profile"),
    (["--only", "bench", "--scoreboard-model", "x"], "--scoreboard-model"),
    (["--only", "bench", "--runs", "5"], "--runs"),
    (["--only", "cost", "--accuracy-items", "FILE"], "--accuracy-items"),
]


@pytest.mark.parametrize("argv, flag", STAGE_OPTIONS, ids=[" ".join(a) for a, _ in STAGE_OPTIONS])
def test_an_option_of_a_stage_that_does_not_run_is_refused(tmp_path, capsys, no_aws, argv, flag):
    argv = [str(tmp_path / "i.jsonl") if a == "FILE" else a for a in argv]
    rc, lines = _run(["--endpoint", f"a={DEAD}", "--model", "m", *argv], tmp_path)
    line = _one_line(capsys, rc, 2, flag)
    assert "does not run" in line
    assert not (tmp_path / "results").exists()


def test_the_same_options_with_their_stage_are_taken(tmp_path, no_aws):
    args = run.parse_args(["--accuracy", "--accuracy-items", str(_items(tmp_path)), "--only", "bench,accuracy,agent",
                           "--bench-requests", "9", "--runs", "2"])
    assert args.stages == ["agent", "bench", "accuracy"]


def _items(tmp_path: Path) -> Path:
    p = tmp_path / "i.jsonl"
    p.write_text(json.dumps({"id": 1, "question": "q", "answer": "2"}) + "\n")
    return p


# -- harness.run: values that meant something else ---------------------------------------------------
BAD_VALUES = [
    (["--backends", "bedrock@bf16"], "bedrock has no variants"),
    (["--backends", "g6,bedrock@int4"], "bedrock has no variants"),
    (["--backends", "bedrock@nova-lite"], "bedrock has no variants"),
    (["--region", ""], "--region ''"),
    (["--region", "  "], "--region ''"),
    (["--results", ""], "--results: '': give a path"),
    (["--json", ""], "--json: '': give a path"),
    (["--outputs-file", ""], "--outputs-file: '': give a path"),
]


@pytest.mark.parametrize("argv, needle", BAD_VALUES, ids=[" ".join(a) or "''" for a, _ in BAD_VALUES])
def test_a_value_that_would_mean_something_else_is_refused(tmp_path, capsys, no_aws, argv, needle):
    lines: list[str] = []
    rc = run.main(argv, session=boto3.Session(region_name="us-east-1"), echo=lines.append)
    _one_line(capsys, rc, 2, needle)


# -- harness.run without credentials: "nothing measured" says why, and is not a success -------------
NO_CREDS = [
    (["--os-user", "ec2-user"], 1), (["--forwarder", "openssh"], 1), (["--bench-from", "instance"], 1),
    (["--only", "agent"], 1), (["--backends", "g6"], 1), (["--accuracy", "--accuracy-items", "FILE"], 1),
    (["--scoreboard-model", "x"], 1),
]


@pytest.mark.parametrize("argv, want", NO_CREDS, ids=[" ".join(a) for a, _ in NO_CREDS])
def test_without_credentials_a_measurement_asked_for_is_not_exit_0(tmp_path, capsys, no_aws, argv, want):
    argv = [str(_items(tmp_path)) if a == "FILE" else a for a in argv]
    rc, lines = _run(argv, tmp_path)
    line = _one_line(capsys, rc, want, "nothing measured")
    assert "no AWS credentials were found" in line and argv[0] in line


def test_without_credentials_the_bare_command_still_prints_the_plan_and_exits_0(tmp_path, capsys, no_aws):
    rc, lines = _run([], tmp_path)
    assert rc == 0 and any("nothing measured: needs AWS credentials" in ln for ln in lines)


@pytest.mark.parametrize("flag", [["--os-user", "ubuntu"], ["--forwarder", "paramiko"], ["--bench-from", "instance"]])
def test_ec2_only_flags_with_only_endpoint_servers_are_refused_before_measuring(tmp_path, capsys, no_aws, flag):
    rc, lines = _run(["--endpoint", f"a={DEAD}", "--model", "m", *flag], tmp_path)
    line = _one_line(capsys, rc, 2, flag[0])
    assert "EC2 backends" in line and "AWS credentials" in line
    assert not (tmp_path / "results").exists()


# -- harness.accuracy ------------------------------------------------------------------------------
ACCURACY = [
    (["--model", "zz=m"], "--model 'zz' names no --endpoint; valid names: a"),
    (["--model", "zz=m", "--model", "a=m"], "--model 'zz' names no --endpoint"),
    (["--out", ""], "--out: '': give a directory"),
    (["--out", "  "], "--out: '  ': give a directory"),
    (["--items", ""], "--items: '': give a path"),
    (["--task-path", ""], "--task-path: '': give a path"),
]


@pytest.mark.parametrize("argv, needle", ACCURACY, ids=[" ".join(a) for a, _ in ACCURACY])
def test_harness_accuracy_refuses_misleading_arguments(tmp_path, capsys, argv, needle, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {"--items": str(_items(tmp_path)), "--out": str(tmp_path / "o")}
    for k in ("--items", "--out"):
        if k in argv:
            base.pop(k)
    rc = accuracy_main(["--endpoint", f"a={DEAD}", *[x for kv in base.items() for x in kv], *argv],
                       echo=lambda s: None)
    _one_line(capsys, rc, 2, needle)
    assert sorted(os.listdir(tmp_path)) == ["i.jsonl"]  # nothing written, not in the current directory


# -- --tasks with a dataset that cannot be had -------------------------------------------------------
TASK = """task: kit_uncached
dataset_path: kit-tests/not-cached-anywhere
dataset_name: main
test_split: test
output_type: generate_until
doc_to_text: "{{question}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: []
  do_sample: false
  temperature: 0.0
  max_gen_toks: 16
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture
def silent_hub():
    """A Hub that accepts connections and never answers."""
    import socket
    s = socket.create_server(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.mark.parametrize("hub", ["refused", "silent", "offline"])
def test_a_dataset_that_cannot_be_reached_is_one_line_quickly(tmp_path, hub, silent_hub):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "kit_uncached.yaml").write_text(TASK)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache
    env["HF_ENDPOINT"] = {"refused": "http://127.0.0.1:9", "silent": silent_hub, "offline": "http://127.0.0.1:9"}[hub]
    if hub == "offline":
        env["HF_HUB_OFFLINE"] = "1"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "harness.accuracy", "--endpoint", f"a={DEAD}", "--model", "m",
                        "--tasks", "kit_uncached", "--task-path", str(tasks), "--out", str(tmp_path / "o")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "kit-tests/not-cached-anywhere (main)" in err[0] and "HF_HOME" in err[0], err
    assert took < 40, took  # the Hub's probe is bounded (5 s); a retrying download took a minute
    assert not (tmp_path / "o").exists()
