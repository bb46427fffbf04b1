"""--bench-from instance against the loopback sshd: the "instance" is this machine, its model
server the paced reference server, its Python this venv's with uvloop, orjson and rich hidden
(the instance's Python may lack them). Results must arrive shaped as a local run's."""
from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace

import pytest

from harness.access import tunnel as access
from harness.bench import remote
from harness.bench.api import run_bench
from harness.bench.spec import BenchSpec
from harness.calibration.refserver import RefServerProcess
from harness.endpoint import Endpoint
from harness.access.process import ProcessForward
from tests.bench.conftest import REPO
from tests.conftest import require_binary, saved_levels
from tests.harness.servers import sshd

WITHOUT = {"KIT_BENCH_WITHOUT": "uvloop,orjson,rich"}
BENCH = BenchSpec(profile="10-4", concurrency=(1, 2), requests=3, slo="ttft_p99_ms=800")


@pytest.fixture(scope="module")
def ref():
    srv = RefServerProcess(cwd=str(REPO))
    try:
        srv.configure(ttft_ms=5, itl_ms=1, tokens_per_chunk=1, usage="vllm", output_tokens=0, record=False)
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def instance(tmp_path, ref):
    """A tunnel to the reference server through the loopback sshd, as eic_tunnel gives one."""
    require_binary("/usr/sbin/sshd")
    key = access.new_ephemeral_key()
    port = int(ref.url.rsplit(":", 1)[1])
    (tmp_path / "sshd").mkdir()
    with sshd("/usr/sbin/sshd", tmp_path / "sshd", access.public_key_line(key)) as s, \
            ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", s["port"])}, username=s["user"],
                           remote_port=port, host_id="i-test", pins=access.HostKeyPins()) as fwd, \
            access.registered(fwd.base_url, fwd):
        yield fwd, Endpoint("g6", protocol="openai", model_id="ref-model", instance_id="i-test", port=port,
                            base_url=fwd.base_url)


def test_the_zip_holds_the_bench_and_nothing_of_aws_or_strands():
    names = {p.relative_to(remote.ROOT).as_posix() for p in remote.kit_modules()}
    assert {"harness/bench/cli.py", "harness/bench/api.py", "harness/bench/clients/openai.py",
            "harness/endpoint.py"} <= names
    assert not any(n.startswith(("harness/agent/providers", "harness/access", "harness/cost")) for n in names)


def test_bench_from_instance_results_arrive_shaped_as_a_local_run(instance, tmp_path):
    fwd, ep = instance
    lines: list[str] = []
    got = remote.run_remote_bench(fwd, ep, tmp_path / "run" / "bench" / "g6", remote_port=ep.port, spec=BENCH,
                                  echo=lines.append, pythons=("/nonexistent/python", sys.executable), env=WITHOUT)
    here = run_bench(Endpoint("g6", protocol="openai", model_id="ref-model", base_url=ref_url(ep)),
                     replace(BENCH, progress=False), out_dir=tmp_path / "local")
    there = tmp_path / "run" / "bench" / "g6"
    assert sorted(p.name for p in there.iterdir()) == sorted(p.name for p in (tmp_path / "local").iterdir())
    assert [lv["concurrency"] for lv in got] == [1, 2] and all(lv["completed"] == 3 for lv in got)
    assert all(lv["bench_from"] == "instance" and lv["instance_cpus"] >= 1 for lv in got)
    assert saved_levels(there / "summary.json") == got
    for a, b in zip(got, here):
        assert set(a) - {"bench_from", "instance_cpus"} == set(b)
        assert a["path_rtt_ms"]["n"] == 20 and a["path_rtt_ms"]["how"] == "GET /models"
    recs = [json.loads(x) for x in (there / "requests.jsonl").read_text().splitlines()]
    local = [json.loads(x) for x in (tmp_path / "local" / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == len(local) and {r["endpoint"] for r in recs} == {"g6"}
    assert {frozenset(r) for r in recs} == {frozenset(r) for r in local}
    with open(there / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    cfg = json.loads((there / "bench.json").read_text())
    assert cfg["bench_from"] == "instance" and cfg["instance_python_path"] == sys.executable
    assert cfg["endpoint"]["base_url"] == f"http://127.0.0.1:{ep.port}/v1"  # the instance's loopback


def ref_url(ep: Endpoint) -> str:
    return f"http://127.0.0.1:{ep.port}/v1"


def test_an_instance_without_a_usable_python_is_one_clear_error(instance, tmp_path):
    fwd, ep = instance
    lines: list[str] = []
    with pytest.raises(remote.RemoteBenchError, match="no Python >= 3.11 with aiohttp"):
        remote.run_remote_bench(fwd, ep, tmp_path / "o", remote_port=ep.port, spec=BENCH, echo=lines.append,
                                pythons=("/nonexistent/python",))


def test_harness_run_stage_bench_from_instance(instance, tmp_path, monkeypatch):
    from harness.run import stages

    fwd, ep = instance
    args = argparse.Namespace(bench_from="instance", bench_profile="10-4", concurrency="1", rate="",
                              bench_requests=2, bench_spec=replace(BENCH, concurrency=(1,), requests=2))
    meta: dict = {}
    lines: list[str] = []
    monkeypatch.setattr(remote, "INSTANCE_PYTHONS", (sys.executable,))
    status = stages.bench([ep], tmp_path, args, lines.append, meta)
    assert status == "ok (1/1 endpoints)", lines
    assert meta["bench"]["g6"]["from"] == "instance" and meta["bench"]["g6"]["path_rtt_ms"]["n"] == 20
    assert saved_levels(tmp_path / "bench" / "g6" / "summary.json")[0]["completed"] == 2
    assert any("running on the instance" in line for line in lines)


def _kit_bench_processes(port: int) -> list[str]:
    """This test's bench processes (other test runs on the machine have other ports)."""
    from pathlib import Path
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "kit.zip" in cmd and f"127.0.0.1:{port}/v1" in cmd and not cmd.startswith(("bash", "sh")):
                found.append(cmd)
    return found


def test_cancel_stops_the_bench_on_the_instance(instance, tmp_path):
    import threading
    import time

    fwd, ep = instance
    cancel = threading.Event()
    long = replace(BENCH, concurrency=(1,), requests=100000)
    threading.Timer(4.0, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(remote.RemoteBenchError):
        remote.run_remote_bench(fwd, ep, tmp_path / "o", remote_port=ep.port, spec=long, echo=lambda line: None,
                                pythons=(sys.executable,), env=WITHOUT, cancel=cancel)
    assert time.monotonic() - t0 < 30
    deadline = time.monotonic() + 20
    while _kit_bench_processes(ep.port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _kit_bench_processes(ep.port) == []  # the watcher saw stdin close and stopped the bench
