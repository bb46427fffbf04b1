"""The offline plan: `python -m harness.cost` with no credentials, no network, from the snapshot."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.catalog import BACKENDS

from harness.cost.breakeven import offline_plan, seed_reference
from harness.cost.prices import load_snapshot

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               # any attempt to reach the network fails fast instead of hanging
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    return subprocess.run([sys.executable, "-m", "harness.cost", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_plan_without_credentials_prints_every_backend_from_the_snapshot(tmp_path):
    p = run(tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    as_of = load_snapshot()["as_of"]
    assert f"no AWS credentials: prices from the snapshot dated {as_of}" in p.stdout
    for b in BACKENDS.values():  # every catalog row, on its default instance type (Bedrock: its model)
        bid, inst = b.id, b.instance_type or b.model_id
        line = next(ln for ln in p.stdout.splitlines() if ln.startswith(bid + " "))
        assert inst in line and f"snapshot {as_of}" in line
    g6 = next(ln for ln in p.stdout.splitlines() if ln.startswith("g6 "))
    for figure in ("0.8048", "588", "131.9", "1.69", "0.150", "710"):
        assert figure in g6


def test_json_interface(tmp_path):
    p = run("--offline", "--json", "--input-per-output", "5", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert set(plan) == set(BACKENDS)
    for bid, row in plan.items():
        for key in ("service", "instance_type", "model_id", "usd_per_month_24x7", "price", "measured"):
            assert key in row
        assert row["price"]["label"].startswith("snapshot ")
    assert round(plan["g6"]["break_even_tok_s"]) == 710
    assert round(plan["sagemaker"]["usd_per_m_output_c16"], 3) == 0.291
    assert "usd_per_m_output_c16" not in plan["inf2"]
    assert plan["inf2"]["roofline"]["ceiling_tok_s"] > plan["g6"]["roofline"]["ceiling_tok_s"] / 2
    assert "break_even_tok_s" not in plan["bedrock"] and "roofline" not in plan["bedrock"]
    assert plan["bedrock"]["usd_per_m_output"] == 0.14 and plan["bedrock"]["usd_per_month_24x7"] == 0


def test_ratio_changes_break_even(tmp_path):
    p0 = offline_plan(0)["g6"]["break_even_tok_s"]
    p5 = offline_plan(5)["g6"]["break_even_tok_s"]
    assert p0 > p5  # fewer input tokens per output token make Bedrock cheaper per output token
    bed = seed_reference()["bedrock"]
    assert p0 == pytest.approx(0.8048 / 3600 / (bed["usd_per_m_output"] / 1e6), abs=0.1)


@pytest.mark.parametrize("args, needle", [
    (["--input-per-output", "-1"], "--input-per-output"),
    (["--input-per-output", "many"], "--input-per-output"),
    (["--region", "mars-north-1"], "unknown AWS region"),
    (["--bogus"], "unrecognized arguments"),
    (["run", "/nonexistent/results"], "not a results directory"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    p = run(*args, tmp_path=tmp_path)
    assert p.returncode == 2
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_payback_command_reproduces_seed_004(tmp_path):
    p = run("payback", "--before", "20400", "--after", "13200", "--engineering", "90000", "--json",
            tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["monthly_saving_usd"] == 7200 and d["payback_months"] == 12.5
    bad = run("payback", "--before", "20400", "--after", "-3", "--engineering", "1", tmp_path=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_run_into_an_unwritable_results_dir_is_one_line(tmp_path, monkeypatch, capsys):
    from harness.cost import run_cost
    from harness.cost.__main__ import main

    (tmp_path / "meta.json").write_text("{}")

    def refuse(path, contract, data):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(run_cost, "write_file", refuse)
    assert main(["run", str(tmp_path), "--offline"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0] and "Permission denied" in err[0]
