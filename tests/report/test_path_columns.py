"""The bench table shows the path's round trip beside TTFT, the server TTFT estimate, where the
bench ran and the client's CPU."""
from __future__ import annotations

from harness.report.page import _bench_row


def _level(**kw):
    lv = {"concurrency": 16, "completed": 10, "failed": 0, "errors": {}, "complete": True,
          "ttft_ms": {"p50": 130.0, "p99": 180.0}, "itl_ms": {"p50": 10.0}, "tpot_ms": {"p50": 10.0},
          "e2e_ms": {"p50": 800.0}, "output_tok_s": 900.0, "request_s": 1.5, "goodput_request_s": 1.5,
          "client_cpu_s": 3.0, "started": 100.0, "ended": 110.0}
    lv.update(kw)
    return lv


def test_row_with_a_measured_path_and_an_on_instance_bench():
    row = _bench_row("g6", _level(path_rtt_ms={"p50": 30.0, "p99": 41.0, "n": 20, "how": "GET /models"},
                                  bench_from="instance", instance_cpus=4), knee=False)
    assert row[0] == "g6 (bench on the instance)"
    assert row[5:8] == ["130 / 180", "30.0 / 41.0", "100"]  # server TTFT (est.) = 130 - 30
    assert row[-2] == "0.30 of 4 (8%)"  # 3 CPU s over a 10 s level, on a 4-CPU instance


def test_row_without_a_path_says_so_and_estimates_nothing():
    row = _bench_row("bedrock", _level(path_rtt_ms={"p50": None, "p99": None, "n": 0, "reason": "x"}), knee=True)
    assert row[0] == "bedrock" and row[6:8] == ["—", "—"] and row[-1] == "knee"
    row = _bench_row("old", _level(), knee=False)  # a summary from before path_rtt_ms existed
    assert row[6:8] == ["—", "—"]


def test_local_client_cpu_is_cores_only():
    assert _bench_row("g6", _level(), knee=False)[-2] == "0.30"
    assert _bench_row("g6", _level(client_cpu_s=None), knee=False)[-2] == "—"
