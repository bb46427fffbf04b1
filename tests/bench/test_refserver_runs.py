"""The whole benchmark against the local paced reference server: accuracy against the server's
own record, per-token counting, faults, the hard time limit, resume, Poisson arrivals."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.bench import metrics
from harness.bench.api import BenchError, run_bench
from harness.bench.spec import BenchSpec
from harness.endpoint import Endpoint
from tests.conftest import saved_levels


def ep(ref) -> Endpoint:
    return Endpoint(name="ref", protocol="openai", model_id="ref-model", base_url=ref.base_url)


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]


def run(ref, out, **kw):
    args = dict(profile="10-16", concurrency=(4,), requests=8, progress=False, request_timeout=10, time_limit=60)
    args.update(kw)
    return run_bench(ep(ref), BenchSpec(**args), out_dir=out)


def truth_ttft(srv: dict, rid: str) -> float:
    r = srv[rid]
    return (r["chunk_ns"][0] - r["t_recv_ns"]) / 1e6


def lateness_ms(rec: dict, srv_rec: dict) -> list[float]:
    """Per chunk, the client's arrival stamp minus the server's send stamp (one clock,
    ``perf_counter_ns``; ``chunk_us`` is floored to whole microseconds)."""
    return [(rec["t_sent_ns"] + us * 1000 - ns) / 1e6 for us, ns in zip(rec["chunk_us"], srv_rec["chunk_ns"])]


def test_ttft_itl_and_throughput_match_the_servers_record(ref, tmp_path):
    """Exact where the server's record makes it exact (which chunks, how many tokens, causality),
    and within 2-5% of the server's truth plus the delay this run's machine demonstrably added:
    on a quiet machine that is the 2-5%; on a loaded one, where the client's process waits for a
    core, the bound widens by the lateness measured in the same run, never by a fixed guess."""
    ref.configure(ttft_ms=60, itl_ms=5, tokens_per_chunk=1)
    levels = run(ref, tmp_path, profile="10-24", concurrency=(1, 8), requests=16)
    srv = ref.records()
    recs = [r for r in records(tmp_path) if not r["warmup"]]
    assert len(recs) == 32 and all(r["ok"] for r in recs)
    late_all, drift = [], []
    for r in recs:
        s = srv[r["id"]]
        assert r["output_tokens"] == 24 and r["chunk_tokens_source"] == "usage_delta"
        assert r["chunk_tokens"] == s["chunk_tokens"] == [1] * 24  # chunk for chunk what was sent
        late = lateness_ms(r, s)
        assert min(late) > -0.001, min(late)  # nothing is stamped before the server sent it
        late_all += late
        drift.append(abs(late[-1] - late[0]) / 23)  # what lateness alone moves this request's mean ITL
        itls = metrics.itls_ms(r)  # per-token gaps: the client's own span, 23 gaps for 24 tokens
        assert len(itls) == 23 and sum(itls) == pytest.approx((r["chunk_us"][-1] - r["chunk_us"][0]) / 1000)
    # a chunk is usually stamped well before the server sends the next one (5 ms later): a client
    # that stamped on a later read, or a batch of chunks at once, would not be
    assert statistics.median(late_all) < 2.5, statistics.median(late_all)
    # TTFT: the client's minus the server's (receipt to first token) is the request's transit plus
    # the first chunk's lateness: never negative (a role chunk taken for the first token would be
    # ~60 ms early), and beyond the transit no later than chunks usually are
    errs = [metrics.ttft_ms(r) - truth_ttft(srv, r["id"]) for r in recs]
    transit = [(srv[r["id"]]["t_recv_ns"] - r["t_sent_ns"]) / 1e6 for r in recs]
    assert min(errs) > -0.5 and min(transit) > -0.001
    first_late = [e - t for e, t in zip(errs, transit)]
    # held to the standard of this run's other stamps: 8 streams' first chunks arrive as one
    # burst, which a starved client works through late (median 6 ms seen under load)
    bound = 2.5 + metrics.percentile(sorted(late_all), 90)
    assert statistics.median(first_late) < bound, (bound, first_late)
    # per request, client mean ITL - server mean ITL = (last lateness - first lateness) / 23:
    # lateness alone moves the pooled mean by at most the mean of |drift| (one 50 ms stall of the
    # server's, caught up at once, is in both sides' gaps, not in the difference)
    noise = statistics.fmean(drift)
    client_all, true_all = [], []
    for r in recs:
        s = srv[r["id"]]
        client_all += metrics.itls_ms(r)
        true_all += [(b - a) / 1e6 for a, b in zip(s["chunk_ns"], s["chunk_ns"][1:])]
    assert abs(statistics.fmean(client_all) - statistics.fmean(true_all)) <= 0.02 * statistics.fmean(true_all) + noise
    for lv in levels:
        mine = [r for r in recs if r["concurrency"] == lv["concurrency"]]
        assert lv["completed"] == 16 and lv["failed"] == 0 and lv["complete"]
        t0 = min(srv[r["id"]]["t_recv_ns"] for r in mine)
        t1 = max(srv[r["id"]]["chunk_ns"][-1] for r in mine)
        true_tok_s = 24 * len(mine) / ((t1 - t0) / 1e9)
        # the client's window (first send to last end) holds the server's (first receipt to last
        # send), so it can only be longer: by the first transit and the last end's lateness
        c0, c1 = min(r["t_sent_ns"] for r in mine), max(r["t_end_ns"] for r in mine)
        assert c0 <= t0 and c1 >= t1
        assert lv["output_tok_s"] <= true_tok_s * 1.001
        assert lv["output_tok_s"] >= 0.95 * true_tok_s * (t1 - t0) / (c1 - c0), (lv["output_tok_s"], true_tok_s)
        true_itl = statistics.fmean([(b - a) / 1e6 for r in mine
                                     for a, b in zip(srv[r["id"]]["chunk_ns"], srv[r["id"]]["chunk_ns"][1:])])
        level_noise = statistics.fmean([drift[recs.index(r)] for r in mine])
        assert abs(lv["itl_ms"]["mean"] - true_itl) <= 0.1 * true_itl + level_noise, (lv["itl_ms"], true_itl)


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
    # per token, a chunk's gap counts once per token at a third of it: 15 values per request that
    # add up to the request's span; per chunk it would be 5 values averaging 3x as much. Compared
    # with what the server sent (its span per token), not the nominal 5 ms, within 10% plus the
    # lateness this run measured (a loaded machine stretches and bunches the server's own gaps)
    srv = ref.records()
    mine = [r for r in records(tmp_path / "out") if not r["warmup"]]
    true_mean = statistics.fmean([(srv[r["id"]]["chunk_ns"][-1] - srv[r["id"]]["chunk_ns"][0]) / 1e6 / 15 for r in mine])
    drift = statistics.fmean([abs(late[-1] - late[0]) / 15 for late in (lateness_ms(r, srv[r["id"]]) for r in mine)])
    assert abs(lv["itl_ms"]["mean"] - true_mean) <= 0.1 * true_mean + drift, (lv["itl_ms"], true_mean, drift)
    for r in mine:
        itls = metrics.itls_ms(r)
        assert len(itls) == 15 and itls[0::3] == itls[1::3] == itls[2::3]  # 3 equal values per gap
        assert sum(itls) == pytest.approx((r["chunk_us"][-1] - r["chunk_us"][0]) / 1000)
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
    # every request hangs, so the limit is what ends the run however long it is: 3 s leaves a
    # busy machine time to start the client and probe the path (both count) before the level
    levels = run(ref, tmp_path, concurrency=(3, 5), requests=100, warmup=0, request_timeout=60,
                 time_limit=3.0)
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
    summary = saved_levels(tmp_path / "summary.json")
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
    cut = run(ref, tmp_path, concurrency=(2,), requests=4, warmup=0, time_limit=3.0)  # hangs: cut by the limit
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
            ep(ref), BenchSpec(profile="10-40", concurrency=(4,), requests=400, progress=False,
                               request_timeout=10, time_limit=60), out_dir=tmp_path))
        # cancel once the warm-ups are done and a measured request finished: 4 measured requests
        # are in flight then (a fixed sleep could land in the path probes on a busy machine)
        jsonl = tmp_path / "requests.jsonl"
        deadline = asyncio.get_running_loop().time() + 60

        def measured_done() -> int:  # complete lines only: the writer may be mid-line
            return sum(not json.loads(x)["warmup"] for x in jsonl.read_text().split("\n")[:-1]) if jsonl.exists() else 0

        while measured_done() < 1:
            assert asyncio.get_running_loop().time() < deadline, "no measured request finished in 60 s"
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cut())
    recs = records(tmp_path)
    srv = ref.records()
    assert len(recs) >= 4 and {r["id"] for r in recs} == set(srv)  # nothing lost, nothing extra
    failed = [r for r in recs if not r["ok"]]
    assert len(failed) == 4 and all(r["error"] == "timeout" for r in failed)
    lv = saved_levels(tmp_path / "summary.json")[0]
    assert not lv["complete"] and lv["failed"] == 4
    assert lv["completed"] + lv["warmup"]["completed"] == len(recs) - 4


def test_rate_auto_doubles_until_a_level_saturates(ref, tmp_path):
    ref.configure(ttft_ms=100, itl_ms=1)  # saturation would need a median TTFT over 400 ms (4x): 300 ms of noise
    levels = run(ref, tmp_path, concurrency=(), rates="auto", rate_start=8, rate_max=32, requests=4,
                 warmup=0)
    assert [lv["rate"] for lv in levels] == [8.0, 16.0, 32.0]  # never saturated: up to rate_max
    ref.configure(ttft_ms=5, itl_ms=1, fault="http_500", fault_every=2)  # 50% fail: saturated
    levels = run(ref, tmp_path / "sat", concurrency=(), rates="auto", rate_start=8, rate_max=32,
                 requests=4, warmup=0)
    assert [lv["rate"] for lv in levels] == [8.0] and levels[0]["failed"] >= 2
