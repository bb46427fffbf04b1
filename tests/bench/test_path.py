"""path_rtt_ms: the measurement path's own round trip, timed before the levels."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from botocore.exceptions import ClientError

from harness.bench.clients.bedrock import BedrockClient
from harness.bench.clients.sagemaker import PROBE_ENDPOINT, SageMakerClient
from harness.bench.path import measure_path, server_ttft_est_ms
from tests.bench.conftest import REPO
from tests.conftest import saved_levels


def test_cli_writes_path_rtt_into_every_level_and_bench_json(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1)
    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-m", "harness.bench", "--base-url", ref.url, "--concurrency", "1,2",
                        "--profile", "10-4", "--requests", "2", "--path-probes", "7", "--out", str(out),
                        "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    levels = saved_levels(out / "summary.json")
    assert len(levels) == 2
    for lv in levels:
        path = lv["path_rtt_ms"]
        assert path["n"] == 7 and path["how"] == "GET /models"
        assert 0 < path["p50"] <= path["p99"] < 1000
    assert json.loads((out / "bench.json").read_text())["path_rtt_ms"] == levels[0]["path_rtt_ms"]
    # the probes are not benchmark requests: the server saw only the levels' chat requests
    assert len(ref.records()) == (2 + 1) + (2 + 2)  # per level: requests + one warm-up per stream


class _Slow:
    protocol = "openai"
    round_trip_how = "sleep"

    def __init__(self, seconds: float, clock: "_Clock | None" = None, first: float | None = None) -> None:
        self.seconds, self.calls, self.clock = seconds, 0, clock
        self.first = seconds if first is None else first

    async def round_trip(self) -> None:
        self.calls += 1
        took = self.first if self.calls == 1 else self.seconds
        if self.clock is None:
            await asyncio.sleep(took)
        else:  # a trip that takes exactly this long on the injected clock, whatever the machine does
            self.clock.ns += round(took * 1e9)
            await asyncio.sleep(0)


class _Clock:
    def __init__(self) -> None:
        self.ns = 10**12

    def perf_counter_ns(self) -> int:
        return self.ns


def test_a_slower_path_measures_slower_and_the_first_trip_is_not_timed(monkeypatch):
    from harness.bench import path as path_mod

    clock = _Clock()
    monkeypatch.setattr(path_mod, "time", clock)  # measure_path's clock: deterministic
    fast, slow = _Slow(0.001, clock), _Slow(0.03, clock, first=0.5)  # a 500 ms connection set-up
    f = asyncio.run(measure_path(fast, 5))
    s = asyncio.run(measure_path(slow, 5))
    assert f["n"] == s["n"] == 5 and slow.calls == 6  # one untimed warm-up trip
    assert (f["p50"], f["p99"]) == (1.0, 1.0) and (s["p50"], s["p99"]) == (30.0, 30.0)  # not 500


def test_no_round_trip_disabled_or_failing_is_n_zero_with_the_reason():
    class NoTrip:
        protocol = "x"

    class Broken(_Slow):
        async def round_trip(self) -> None:
            raise ConnectionRefusedError("refused")

    assert asyncio.run(measure_path(NoTrip(), 5)) == {
        "p50": None, "p99": None, "n": 0, "how": None, "reason": "the x client has no round trip to time"}
    assert asyncio.run(measure_path(_Slow(0), 0))["reason"].startswith("not measured")
    r = asyncio.run(measure_path(Broken(0), 3))
    assert r["n"] == 0 and "ConnectionRefusedError: refused" in r["reason"]


def _denied(op: str, code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op)


def test_boto_clients_time_an_answered_call_that_runs_no_model():
    class FakeRuntime:
        def __init__(self) -> None:
            self.calls: list[tuple[str, dict]] = []

        def list_async_invokes(self, **kw):
            self.calls.append(("list_async_invokes", kw))
            time.sleep(0.01)
            raise _denied("ListAsyncInvokes", "AccessDeniedException", 403)  # still a round trip

        def invoke_endpoint(self, **kw):
            self.calls.append(("invoke_endpoint", kw))
            time.sleep(0.01)
            raise _denied("InvokeEndpoint", "ValidationError", 400)

    fake = FakeRuntime()
    b = asyncio.run(measure_path(BedrockClient("m", client=fake), 3))
    s = asyncio.run(measure_path(SageMakerClient("ep", "m", client=fake), 3))
    for r in (b, s):
        assert r["n"] == 3 and r["p50"] >= 10
    assert {name for name, _ in fake.calls} == {"list_async_invokes", "invoke_endpoint"}
    assert all(kw["EndpointName"] == PROBE_ENDPOINT for name, kw in fake.calls if name == "invoke_endpoint")
    assert "ListAsyncInvokes" in b["how"] and PROBE_ENDPOINT in s["how"]


def test_unanswered_boto_call_is_a_failed_probe():
    from botocore.exceptions import EndpointConnectionError

    class Down:
        def list_async_invokes(self, **kw):
            raise EndpointConnectionError(endpoint_url="https://bedrock-runtime.example")

    r = asyncio.run(measure_path(BedrockClient("m", client=Down()), 3))
    assert r["n"] == 0 and "EndpointConnectionError" in r["reason"]


@pytest.mark.parametrize("ttft,path,want", [
    (120.0, {"p50": 20.0}, 100.0), (10.0, {"p50": 30.0}, 0.0), (None, {"p50": 3.0}, None),
    (50.0, {"p50": None, "n": 0}, None), (50.0, None, None)])
def test_server_ttft_estimate(ttft, path, want):
    assert server_ttft_est_ms(ttft, path) == want
