"""The command line: a real run, and bad input that must give one line and a non-zero exit."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench.conftest import REPO
from tests.conftest import saved_levels


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.bench", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_run_discovers_the_model_and_writes_results(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1)
    p = cli("--base-url", ref.url, "--concurrency", "1,2", "--profile", "10-8", "--requests", "3",
            "--out", str(tmp_path / "o"), "--slo", "ttft_p99_ms=800")
    assert p.returncode == 0, p.stderr
    levels = saved_levels(tmp_path / "o" / "summary.json")
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    rec = json.loads((tmp_path / "o" / "requests.jsonl").read_text().splitlines()[0])
    assert rec["model"] == "ref-model"  # from /v1/models


@pytest.mark.parametrize("args,needle", [
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "a,b"], "--concurrency"),
    (["--rate", "-2"], "--rate"),
    (["--profile", "huge"], "--profile"),
    (["--slo", "ttft=3"], "--slo"),
    (["--duration", "5"], "not allowed with argument --requests"),
    (["--timeout", "0"], "--timeout"),
    (["--request-timeout", "0"], "--request-timeout"),  # harness.accuracy's name for the same deadline
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, args, needle):
    base = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--requests", "2",
            "--out", str(tmp_path / "o")]
    p = cli(*base, *args)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_missing_target_and_unreachable_model_discovery(tmp_path):
    p = cli("--requests", "2", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "exactly one of --base-url" in p.stderr
    p = cli("--base-url", "http://127.0.0.1:9", "--requests", "2", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--model" in p.stderr


def test_unreachable_server_fails_requests_as_connect_errors_not_the_run(tmp_path):
    p = cli("--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "2",
            "--requests", "2", "--warmup", "0", "--out", str(tmp_path / "o"), "--quiet")
    assert p.returncode == 3 and "nothing was measured" in p.stderr, p.stderr  # recorded, and said
    lv = saved_levels(tmp_path / "o" / "summary.json")[0]
    assert lv["errors"] == {"connect": 2} and lv["completed"] == 0


def test_time_limit_reached_exits_1_and_says_what_is_missing(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1, fault="hang", fault_every=1)
    p = cli("--base-url", ref.url, "--model", "ref-model", "--concurrency", "1,2", "--requests", "2",
            "--time-limit", "1", "--out", str(tmp_path / "o"), "--quiet")
    assert p.returncode == 1 and "concurrency=1, concurrency=2" in p.stderr and "--resume" in p.stderr


def test_the_benchmark_never_imports_torch_or_transformers():
    code = ("import sys, harness.bench.cli, harness.bench.api, harness.bench.clients.openai, "
            "harness.bench.clients.sagemaker, harness.bench.clients.bedrock, harness.bench.summarize\n"
            "from harness.bench.profiles import get_profile\n"
            "get_profile('agent').request(0); get_profile('2k-512').request(1)\n"
            "bad = [m for m in ('torch', 'transformers', 'tokenizers', 'strands') if m in sys.modules]\n"
            "assert not bad, bad\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
