"""The calibration scripts as a user runs them (``python -m harness.calibration.…``), at tiny
sizes: bad input is one line and exit 2, an unreachable server one line, and a smoke run gives
numbers the reference server's pacing bounds (an oracle independent of the bench)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.calibration.loopback_sshd import free_port
from harness.calibration.refserver import RefServerProcess
from tests.conftest import require_binary

REPO = Path(__file__).resolve().parents[2]


def run(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", f"harness.calibration.{module}", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("module,args,named", [
    ("tunnel", ["--levels", "1,x"], "--levels"),
    ("tunnel", ["--requests", "0"], "--requests"),
    ("neuron_engine", ["--model", "m", "--concurrency", "0,2"], "--concurrency"),
    ("neuron_engine", ["--model", "m", "--tokens", "-3"], "--tokens"),
    ("refserver", ["--usage", "bogus"], "--usage 'bogus'"),
    ("fidelity", ["--nice", "x"], "--nice"),
])
def test_bad_value_is_one_line_naming_it_exit_2(module, args, named):
    r = run(module, *args, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"python -m harness.calibration.{module}: ") and named in r.stderr


def test_neuron_engine_says_so_when_no_server_listens():
    r = run("neuron_engine", "--model", "m", "--url", f"http://127.0.0.1:{free_port()}", timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("python -m harness.calibration.neuron_engine: cannot reach http://127.0.0.1:")


def test_neuron_engine_measures_a_paced_server():
    """Against the reference server (TTFT 30 ms, 2 ms per token, usage as vLLM sends it): one
    row per concurrency, each stream's requests counted, TTFT at least the server's 30 ms, and
    per-stream tok/s no more than the pacing allows (1000 / 2 ms)."""
    ref = RefServerProcess(cwd=str(REPO))
    try:
        ref.configure(ttft_ms=30, itl_ms=2, tokens_per_chunk=1, usage="vllm", output_tokens=0)
        r = run("neuron_engine", "--url", ref.url, "--model", "ref-model", "--tokens", "8",
                "--concurrency", "1,3", "--rounds", "2")
    finally:
        ref.stop()
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert [(int(c), int(n)) for c, n, *_ in rows] == [(1, 2), (3, 6)]
    for _, _, total, per_stream, ttft_ms, _ in rows:
        assert float(ttft_ms) >= 30
        assert 0 < float(per_stream) <= 500


def test_neuron_engine_cases_against_a_paced_server():
    """The default run (the four engine-efficiency cases) against the reference server (TTFT 30 ms, 2 ms per
    token, every request served at once): each case's request count, token totals from the
    server's usage, and a join case where the late request's first token needs only its own 30 ms,
    far less than the two 384-token requests take (>= 30 ms + 384 x 2 ms)."""
    ref = RefServerProcess(cwd=str(REPO))
    try:
        ref.configure(ttft_ms=30, itl_ms=2, tokens_per_chunk=1, usage="vllm", output_tokens=0)
        r = run("neuron_engine", "--url", ref.url, "--model", "ref-model", "--join-delay", "0.2")
    finally:
        ref.stop()
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
    assert [rows[k][1:3] for k in ("uniform", "mixed", "16x64")] == [["8", "512"], ["48", "5376"], ["32", "2048"]]
    join = re.search(r"took ([0-9.]+) s; .* sent ([0-9.]+) s later: first token after ([0-9]+) ms \(([0-9]+)%", r.stdout)
    long_s, sent, ttft_ms, share = float(join[1]), float(join[2]), int(join[3]), int(join[4])
    assert sent <= 0.2 + 0.05 and "measured nothing" not in r.stdout
    assert long_s >= 0.03 + 384 * 0.002 and 30 <= ttft_ms < long_s * 1000 and abs(share - 100 * ttft_ms / 1000 / long_s) <= 1
    assert "verdict  mixed/uniform throughput" in r.stdout


def test_tunnel_json_smoke_run():
    """Both paths at two levels through a real sshd; every request completes, TTFT is at least
    the server's, and the comparison has one row per level."""
    require_binary("/usr/sbin/sshd")
    require_binary("ssh-keygen")
    r = run("tunnel", "--levels", "1,2", "--requests", "2", "--ttft-ms", "20", "--itl-ms", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["reference"]["ttft_ms"] == 20 and out["reference"]["requests_per_level"] == 2
    assert [(lv["path"], lv["concurrency"]) for lv in out["levels"]] == [
        ("direct", 1), ("direct", 2), ("tunnel-openssh", 1), ("tunnel-openssh", 2)]
    for lv in out["levels"]:
        assert lv["completed"] == 2 and lv["failed"] == 0
        assert lv["ttft_ms"]["p50"] >= 20  # the server sends nothing sooner; ITL has no such
        assert lv["output_tok_s"] > 0      # floor: a busy tunnel can coalesce chunks (ITL 0)
    assert [c["concurrency"] for c in out["tunnel_vs_direct"]] == [1, 2]


def test_tunnel_table_names_both_paths():
    require_binary("/usr/sbin/sshd")
    r = run("tunnel", "--levels", "1", "--requests", "2", "--ttft-ms", "5", "--itl-ms", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^direct\s+1\s+2\s+0\s", r.stdout, re.M)
    assert re.search(r"^tunnel-openssh\s+1\s+2\s+0\s", r.stdout, re.M)
    assert "tunnel-openssh - direct at 1 streams: TTFT p99 " in r.stdout


def test_tunnel_all_forwarders_and_on_instance_in_one_run():
    """--forwarder all --on-instance --rounds 2: OpenSSH's client, the paramiko process, the old
    in-process forwarder and the bench run over SSH next to the server, each against direct,
    twice interleaved; the comparison has one row per path (medians over the rounds)."""
    require_binary("/usr/sbin/sshd")
    require_binary("ssh")
    r = run("tunnel", "--levels", "2", "--requests", "2", "--ttft-ms", "5", "--itl-ms", "1",
            "--forwarder", "all", "--on-instance", "--rounds", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    paths = ["direct", "tunnel-openssh", "tunnel-paramiko", "tunnel-inproc", "on-instance"]
    assert [(lv["path"], lv["round"]) for lv in out["levels"]] == [(p, n) for n in (1, 2) for p in paths]
    assert all(lv["completed"] == 2 and lv["failed"] == 0 for lv in out["levels"])
    assert all(lv["forwarder_cpu_us_per_chunk"] is not None for lv in out["levels"]
               if lv["path"] in ("tunnel-openssh", "tunnel-paramiko"))
    assert [(c["path"], c["concurrency"]) for c in out["tunnel_vs_direct"]] == [
        (p, 2) for p in paths[1:]]


def test_tunnel_control_relays_carry_the_stream_like_a_tunnel():
    """--control: two chained nginx stream relays (no SSH) between the bench and the server,
    compared with direct like each tunnel path; every request completes through them."""
    require_binary("/usr/sbin/sshd")
    require_binary("nginx")
    r = run("tunnel", "--levels", "2", "--requests", "2", "--ttft-ms", "5", "--itl-ms", "1",
            "--control", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [lv["path"] for lv in out["levels"]] == ["direct", "tunnel-openssh", "relay-2x-nginx"]
    assert all(lv["completed"] == 2 and lv["failed"] == 0 for lv in out["levels"])
    assert [c["path"] for c in out["tunnel_vs_direct"]] == ["tunnel-openssh", "relay-2x-nginx"]
