"""The whole benchmark against the local paced reference server: accuracy against the server's
own record, per-token counting, faults, the hard time limit, resume, Poisson arrivals."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.bench import metrics
from harness.bench.api import BenchError, run_bench
from harness.endpoint import Endpoint


def ep(ref) -> Endpoint:
    return Endpoint(name="ref", protocol="openai", model_id="ref-model", base_url=ref.base_url)


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]


def run(ref, out, **kw):
    args = dict(profile="10-16", concurrency=(4,), requests=8, out_dir=out, progress=False,
                request_timeout=10, time_limit=60)
    args.update(kw)
    return run_bench(ep(ref), **args)


def truth_ttft(srv: dict, rid: str) -> float:
    r = srv[rid]
    return (r["chunk_ns"][0] - r["t_recv_ns"]) / 1e6


def test_ttft_itl_and_throughput_match_the_servers_record(ref, tmp_path):
    ref.configure(ttft_ms=60, itl_ms=5, tokens_per_chunk=1)
    levels = run(ref, tmp_path, profile="10-24", concurrency=(1, 8), requests=16)
    srv = ref.records()
    recs = [r for r in records(tmp_path) if not r["warmup"]]
    assert len(recs) == 32 and all(r["ok"] for r in recs)
    errs = [metrics.ttft_ms(r) - truth_ttft(srv, r["id"]) for r in recs]
    assert statistics.median(errs) < 5.0 and max(errs) < 40.0 and min(errs) > -0.5
    # per-token ITL: the client's gaps against the server's send times, request by request
    # (loose: a loaded test machine delays single chunks) and pooled over all (tight)
    client_all, true_all = [], []
    for r in recs:
        s = srv[r["id"]]
        true = [(b - a) / 1e6 for a, b in zip(s["chunk_ns"], s["chunk_ns"][1:])]
        assert statistics.fmean(metrics.itls_ms(r)) == pytest.approx(statistics.fmean(true), rel=0.1)
        assert r["output_tokens"] == 24 and r["chunk_tokens_source"] == "usage_delta"
        client_all += metrics.itls_ms(r)
        true_all += true
    assert statistics.fmean(client_all) == pytest.approx(statistics.fmean(true_all), rel=0.02)
    for lv in levels:
        ids = {r["id"] for r in recs if r["concurrency"] == lv["concurrency"]}
        t0 = min(srv[i]["t_recv_ns"] for i in ids)
        t1 = max(srv[i]["chunk_ns"][-1] for i in ids)
        true_tok_s = 24 * len(ids) / ((t1 - t0) / 1e9)
        assert lv["output_tok_s"] == pytest.approx(true_tok_s, rel=0.05)
        assert lv["completed"] == 16 and lv["failed"] == 0 and lv["complete"]
        assert lv["itl_ms"]["mean"] == pytest.approx(5.0, rel=0.1)


@pytest.mark.parametrize("usage", ["vllm", "final", "none"])
def test_multi_token_chunks_are_counted_per_token(ref, tmp_path, usage):
    """3 tokens per chunk, 15 ms apart: per-token ITL is 5 ms whatever usage the server sends
    (without usage, the optional tokenizer counts the words of each chunk)."""
    ref.configure(ttft_ms=30, itl_ms=5, tokens_per_chunk=3, usage=usage)
    tok = None
    if usage == "none":
        from harness.calibration.fidelity import build_tokenizer
        tok = build_tokenizer(tmp_path / "tok")
    levels = run(ref, tmp_path / "out", profile="10-18", concurrency=(2,), requests=4, tokenizer=tok)
    lv = levels[0]
    assert lv["completed"] == 4
    assert lv["itl_ms"]["p50"] == pytest.approx(5.0, rel=0.1)  # per chunk it would be 15 ms
    assert lv["itl_ms"]["n"] == 4 * 15  # 18 tokens, the first chunk's 3 have no gap
    src = {"vllm": "usage_delta", "final": "usage_by_chars", "none": "tokenizer"}[usage]
    assert lv["chunk_token_sources"] == {src: 4}
    assert lv["output_tokens"] == 4 * 18


def test_role_only_first_chunk_does_not_count_as_first_token(ref, tmp_path):
    ref.configure(ttft_ms=150, itl_ms=5, role_chunk=True)
    lv = run(ref, tmp_path, concurrency=(1,), requests=2)[0]
    assert lv["ttft_ms"]["p50"] >= 149.0  # the role chunk arrives at ~0 ms


@pytest.mark.parametrize("fault,cls", [("http_500", "http_500"), ("http_429", "throttled"),
                                       ("drop", "dropped"), ("garbage", "protocol")])
def test_faults_are_recorded_by_class_and_kept_out_of_latency(ref, tmp_path, fault, cls):
    ref.configure(ttft_ms=20, itl_ms=2, fault=fault, fault_every=3)
    lv = run(ref, tmp_path, concurrency=(3,), requests=9, warmup=0)[0]
    recs = records(tmp_path)
    srv = ref.records()
    assert len(recs) == 9 and {r["id"] for r in recs} == set(srv)  # every request sent is recorded
    failed = [r for r in recs if not r["ok"]]
    assert lv["failed"] == len(failed) == 3 and lv["errors"] == {cls: 3}
    assert all(r["error"] == cls for r in failed)
    assert lv["completed"] == 6 and lv["ttft_ms"]["n"] == 6 and lv["e2e_ms"]["n"] == 6
    if fault == "http_500":
        assert all(r["http_status"] == 500 for r in failed)


def test_a_server_that_hangs_times_out_and_the_run_goes_on(ref, tmp_path):
    ref.configure(ttft_ms=20, itl_ms=2, fault="hang", fault_every=2)
    lv = run(ref, tmp_path, concurrency=(2,), requests=4, warmup=0, request_timeout=0.5)[0]
    recs = records(tmp_path)
    assert len(recs) == 4 and lv["errors"] == {"timeout": 2} and lv["completed"] == 2
    assert lv["complete"]  # per-request timeouts do not cut the level short


def test_hard_time_limit_ends_the_run_and_records_requests_in_flight(ref, tmp_path):
    ref.configure(ttft_ms=20, itl_ms=2, fault="hang", fault_every=1)
    levels = run(ref, tmp_path, concurrency=(3, 5), requests=100, warmup=0, request_timeout=60,
                 time_limit=1.0)
    recs = records(tmp_path)
    assert len(levels) == 1 and not levels[0]["complete"]  # the second level never started
    assert len(recs) == 3 and all(r["error"] == "timeout" for r in recs)
    assert len(ref.records()) == 3


def test_resume_skips_completed_levels(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1)
    first = run(ref, tmp_path, concurrency=(1, 2), requests=3)
    n_before = len(records(tmp_path))
    with pytest.raises(BenchError, match="--resume"):
        run(ref, tmp_path, concurrency=(1, 2, 4), requests=3)
    levels = run(ref, tmp_path, concurrency=(1, 2, 4), requests=3, resume=True)
    assert [lv["concurrency"] for lv in levels] == [1, 2, 4]
    assert [lv["level_run"] for lv in levels[:2]] == [lv["level_run"] for lv in first]
    recs = records(tmp_path)
    assert len(recs) == n_before + 4 + 3  # only concurrency 4 ran again (4 warm-up + 3)
    with pytest.raises(BenchError, match="profile"):
        run(ref, tmp_path, profile="10-8", concurrency=(1,), requests=3, resume=True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == json.loads(json.dumps(levels))
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"concurrency", "ttft_p99_ms", "itl_p50_ms", "output_tok_s", "goodput_request_s"} <= set(header)


def test_poisson_rates_schedule_open_loop_with_queue_time(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1)
    levels = run(ref, tmp_path, concurrency=(), rates=(20.0,), requests=20, seed=3)
    lv = levels[0]
    assert lv["rate"] == 20.0 and "concurrency" not in lv and lv["completed"] == 20
    recs = [r for r in records(tmp_path) if not r["warmup"]]
    sched = sorted(r["t_scheduled_ns"] for r in recs)
    gaps = [(b - a) / 1e9 for a, b in zip(sched, sched[1:])]
    assert 0.02 < statistics.fmean(gaps) < 0.1  # mean 1/20 s, exponential
    assert all(metrics.queue_ms(r) >= 0 for r in recs) and lv["queue_ms"]["n"] == 20


def test_summary_level_has_the_documented_fields(ref, tmp_path):
    ref.configure(ttft_ms=10, itl_ms=1)
    lv = run(ref, tmp_path, concurrency=(2,), requests=4, slo="ttft_p99_ms=800,itl_p99_ms=100")[0]
    for k in ("concurrency", "completed", "failed", "errors", "output_tok_s", "request_s",
              "goodput_request_s"):
        assert k in lv
    for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(lv[k]) == {"p50", "p90", "p95", "p99", "mean", "n"}
    assert lv["goodput_request_s"] == lv["request_s"] and lv["slo_met"] is True


def test_a_level_cut_by_the_time_limit_is_rerun_on_resume_and_summarize_keeps_the_rerun(ref, tmp_path):
    from harness.bench.summarize import summarize_dir
    ref.configure(ttft_ms=10, itl_ms=1, fault="hang", fault_every=1)
    cut = run(ref, tmp_path, concurrency=(2,), requests=4, warmup=0, time_limit=0.5)
    assert not cut[0]["complete"]
    assert not summarize_dir(tmp_path)[0]["complete"]  # the recomputation keeps that too
    cfg = json.loads((tmp_path / "bench.json").read_text())
    assert cfg["levels_not_run"] == ["concurrency=2"]
    ref.configure(ttft_ms=10, itl_ms=1)
    levels = run(ref, tmp_path, concurrency=(2,), requests=4, warmup=0, resume=True)
    assert levels[0]["complete"] and levels[0]["completed"] == 4
    assert levels[0]["level_run"] != cut[0]["level_run"]
    again = summarize_dir(tmp_path)
    assert len(again) == 1 and again[0]["level_run"] == levels[0]["level_run"]
    for k in ("completed", "failed", "ttft_ms", "itl_ms", "output_tok_s", "goodput_request_s"):
        assert again[0][k] == levels[0][k]  # the offline recomputation gives the same numbers


def test_cancelling_the_run_mid_level_records_every_request_sent(ref, tmp_path):
    """Ctrl-C (asyncio.Runner cancels the main task): requests in flight are recorded as failed,
    none is sent after the backend closes, and the cut level is in summary.json as incomplete."""
    import asyncio

    from harness.bench.api import run_bench_async

    ref.configure(ttft_ms=20, itl_ms=5)

    async def cut() -> None:
        task = asyncio.create_task(run_bench_async(
            ep(ref), profile="10-40", concurrency=(4,), requests=400, out_dir=tmp_path,
            progress=False, request_timeout=10, time_limit=60))
        await asyncio.sleep(0.8)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cut())
    recs = records(tmp_path)
    srv = ref.records()
    assert len(recs) >= 4 and {r["id"] for r in recs} == set(srv)  # nothing lost, nothing extra
    failed = [r for r in recs if not r["ok"]]
    assert len(failed) == 4 and all(r["error"] == "timeout" for r in failed)
    lv = json.loads((tmp_path / "summary.json").read_text())[0]
    assert not lv["complete"] and lv["failed"] == 4
    assert lv["completed"] + lv["warmup"]["completed"] == len(recs) - 4


def test_rate_auto_doubles_until_a_level_saturates(ref, tmp_path):
    ref.configure(ttft_ms=30, itl_ms=1)  # 4x the first median TTFT would be 120 ms: not by chance
    levels = run(ref, tmp_path, concurrency=(), rates="auto", rate_start=8, rate_max=32, requests=4,
                 warmup=0)
    assert [lv["rate"] for lv in levels] == [8.0, 16.0, 32.0]  # never saturated: up to rate_max
    ref.configure(ttft_ms=5, itl_ms=1, fault="http_500", fault_every=2)  # 50% fail: saturated
    levels = run(ref, tmp_path / "sat", concurrency=(), rates="auto", rate_start=8, rate_max=32,
                 requests=4, warmup=0)
    assert [lv["rate"] for lv in levels] == [8.0] and levels[0]["failed"] >= 2
