"""``make demo``'s script (scripts/demo.sh) end to end at minimal size: the real engine on the
tiny random Gemma 4, the real harness.run, a report on disk, and no process left behind."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import saved_levels

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "demo.sh"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_runs_the_whole_flow_and_stops_the_engine(tmp_path):
    env = {**os.environ, "PY": sys.executable, "DEMO_RUNS": "1", "DEMO_CONCURRENCY": "1",
           "DEMO_REQUESTS": "2", "DEMO_RESULTS": str(tmp_path / "results"),
           "AWS_ACCESS_KEY_ID": "AKIDEMOSHOULDNOTBEUSED", "AWS_SECRET_ACCESS_KEY": "x"}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-3000:]
    pid = int(re.search(r"engine pid (\d+)", out).group(1))
    assert not _alive(pid), "the engine is still running"
    assert f"engine stopped (pid {pid})" in out
    # the agent trial ran, failed, and the output said why before it did
    assert "expect the agent trial to FAIL: the weights are random" in out
    assert re.search(r"^demo\s+run 1/1\s+FAIL", out, re.M)
    assert "agent trial: 0/1 runs passed" in out
    # the path printed last is the report on disk, in the results root given
    report = Path(re.search(r"report: (\S+)$", out.strip()).group(1))
    if not report.is_absolute():
        report = REPO / report
    assert report.is_file() and report.parent.parent == tmp_path / "results"
    run_dir = report.parent
    assert (run_dir / "report.md").is_file() and (run_dir / "cost.json").is_file()
    # the bench measured the engine: both requests completed at the one level asked for
    (level,) = saved_levels(run_dir / "bench" / "demo" / "summary.json")  # with its schema_version
    assert level["concurrency"] == 1 and level["completed"] == 2 and level["failed"] == 0
    # no AWS: the fake credentials in the environment were not used (no discovery, no scoreboard)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert list(meta)[0] == "schema_version" and list(json.loads((run_dir / "cost.json").read_text()))[0] == "schema_version"
    assert [e["name"] for e in meta["endpoints"]] == ["demo"]
    assert "scoreboard" not in meta["stages"]
    # what the engine served (its GET /v1/models weights, harness/run/weights.py): the tiny model's
    # config and tokenizer digest, in meta.json and in the report's Weights served section
    from ami.neuron.served import record

    tiny = record(None, "tiny-random-gemma4", tiny_random=True)["digest"]
    assert meta["weights"]["demo"]["digest"] == tiny and meta["weights"]["demo"]["source"] == "GET /v1/models"
    table = (run_dir / "report.md").read_text().split("## Weights served", 1)[1].split("## ", 1)[0]
    assert f"| {tiny[:16]} |" in table and "tiny random (built in memory)" in table
    assert f"weights    demo: tiny-random-gemma4, config+tokenizer {tiny[:12]}" in out  # harness.run's line


def test_demo_without_the_engine_packages_is_one_line_exit_2(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    r = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env={**os.environ, "PY": str(venv / "bin" / "python")},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert "cannot import torch and transformers" in r.stderr
