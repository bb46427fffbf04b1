"""Stream parsing, token attribution and metric definitions, on hand-made inputs."""
from __future__ import annotations

import json

import pytest

from harness.bench import metrics
from harness.bench.record import Record
from harness.bench.sse import OpenAIStreamParser


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text=None, role=False, finish=None, usage=None):
    delta = {"role": "assistant", "content": ""} if role else {"content": text}
    o = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        o["usage"] = {"prompt_tokens": 7, "completion_tokens": usage, "total_tokens": 7 + usage}
    return o


def parse(feeds: list[tuple[bytes, int]]) -> tuple[Record, OpenAIStreamParser]:
    rec = Record("r1", {})
    rec.t_sent_ns = 0
    p = OpenAIStreamParser(rec)
    for data, t in feeds:
        p.feed(data, t)
    p.close(feeds[-1][1])
    rec.finish(ok=p.complete())
    rec.t_end_ns = feeds[-1][1]
    return rec, p


def test_role_only_first_chunk_is_not_a_token_and_usage_trailer_is_not_a_chunk():
    stream = [(sse(chunk(role=True)), 1_000_000), (sse(chunk(" a")), 50_000_000),
              (sse(chunk(" b", finish="length")), 60_000_000),
              (sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}) + b"data: [DONE]\n\n",
               61_000_000)]
    rec, p = parse(stream)
    d = rec.to_dict()
    assert metrics.ttft_ms(d) == 50.0  # not 1 ms: the role chunk carries no token
    assert metrics.e2e_ms(d) == 61.0
    # the record keeps raw timings only; every derived number has its one home in metrics
    assert not {"ttft_ms", "e2e_ms", "queue_ms", "tpot_ms"} & set(d)
    assert d["chunk_us"] == [50_000, 60_000]
    assert (d["output_tokens"], d["output_tokens_source"], d["prompt_tokens"]) == (2, "usage", 7)
    assert p.done and d["ok"] and d["finish_reason"] == "length"


def test_lines_split_across_reads_and_several_events_in_one_read():
    raw = sse(chunk(role=True)) + sse(chunk(" one")) + sse(chunk(" two")) + sse(chunk(" three", finish="stop"))
    raw += b"data: [DONE]\n\n"
    cuts = [5, 40, 41, 130, 300, len(raw)]
    feeds, prev = [], 0
    for i, c in enumerate(cuts):
        feeds.append((raw[prev:c], (i + 1) * 1_000_000))
        prev = c
    rec, p = parse(feeds)
    assert [t for t in rec.chunk_text] == [" one", " two", " three"]
    assert p.complete()


def test_continuous_usage_gives_exact_tokens_per_chunk_and_per_token_itl():
    # chunk 1 at 100 ms carries 2 tokens, chunk 2 at 130 ms carries 3, chunk 3 at 140 ms carries 1
    stream = [(sse(chunk(role=True, usage=0)), 1_000_000),
              (sse(chunk(" a b", usage=2)), 100_000_000),
              (sse(chunk(" c d e", usage=5)), 130_000_000),
              (sse(chunk(" f", finish="length", usage=6)), 140_000_000)]
    rec, _ = parse(stream)
    d = rec.to_dict()
    assert d["chunk_tokens"] == [2, 3, 1] and d["chunk_tokens_source"] == "usage_delta"
    assert metrics.itls_ms(d) == pytest.approx([10.0, 10.0, 10.0, 10.0])  # 30 ms / 3 tokens, then 10 ms
    assert metrics.tpot_ms(d) == pytest.approx(40.0 / 5)


def test_final_usage_only_spreads_tokens_by_characters_else_tokenizer_else_chunks():
    stream = [(sse(chunk(" aa bb")), 10_000_000), (sse(chunk(" cc")), 20_000_000),
              (sse(chunk(" dd ee ff", finish="length")), 30_000_000),
              (sse({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 6}}), 31_000_000)]
    rec, _ = parse(stream)
    d = rec.to_dict()
    assert d["chunk_tokens_source"] == "usage_by_chars" and sum(d["chunk_tokens"]) == 6
    assert d["chunk_tokens"] == [2, 1, 3]
    d2 = rec.to_dict(lambda texts: [len(t.split()) for t in texts])
    assert d2["chunk_tokens"] == [2, 1, 3] and d2["chunk_tokens_source"] == "tokenizer"
    assert d2["output_tokens_source"] == "usage"  # the server's total still wins
    rec.usage_completion = None
    d3 = rec.to_dict()
    assert (d3["chunk_tokens"], d3["output_tokens"], d3["output_tokens_source"]) == ([1, 1, 1], 3, "chunks")


def test_stream_without_finish_or_done_is_incomplete_and_garbage_is_a_protocol_error():
    rec, p = parse([(sse(chunk(" a")), 1), (sse(chunk(" b")), 2)])
    assert not p.complete()
    rec2, _ = parse([(b"data: {oops\n\n", 1)])
    assert rec2.error == "protocol" and not rec2.ok


def test_bare_json_lines_and_error_events():
    rec, p = parse([(json.dumps(chunk(" x", finish="stop")).encode() + b"\n", 5)])
    assert rec.chunk_text == [" x"] and p.complete()
    rec2, _ = parse([(sse({"error": {"message": "CUDA OOM"}}), 5)])
    assert rec2.error == "stream_error" and "CUDA OOM" in rec2.error_detail
    rec3, _ = parse([(sse({**chunk(" y", finish="stop"), "error": None}), 5)])  # a null error field
    assert rec3.ok and rec3.chunk_text == [" y"]


def test_percentiles_match_numpy_linear():
    import numpy as np
    vals = [3.0, 1.0, 7.5, 2.2, 9.9, 4.4, 5.0]
    s = metrics.stats(vals)
    for p in (50, 90, 95, 99):
        assert s[f"p{p}"] == pytest.approx(float(np.percentile(vals, p)), abs=1e-3)
    assert s["n"] == 7 and metrics.stats([])["p50"] is None


def _rec(ok=True, ttft_us=100_000, gap_us=10_000, n=5, sent=0, error=None, warmup=False):
    us = [ttft_us + i * gap_us for i in range(n)]
    return {"ok": ok, "error": error, "warmup": warmup, "t_sent_ns": sent,
            "t_end_ns": sent + (us[-1] + 1000) * 1000, "chunk_us": us if ok else us[:2],
            "chunk_tokens": [1] * (n if ok else 2), "output_tokens": n if ok else 2,
            "t_scheduled_ns": sent - 100_000, "output_tokens_source": "usage", "chunk_tokens_source": "usage_delta"}


def test_failed_requests_are_counted_by_class_and_never_enter_latency():
    recs = [_rec(sent=0), _rec(sent=1_000_000),
            _rec(ok=False, error="http_500", ttft_us=1), _rec(ok=False, error="timeout", ttft_us=1),
            _rec(ok=False, error="http_500", ttft_us=1), _rec(warmup=True, ttft_us=999_000)]
    lv = metrics.summarize_level(recs)
    assert (lv["completed"], lv["failed"]) == (2, 3)
    assert lv["errors"] == {"http_500": 2, "timeout": 1}
    assert lv["ttft_ms"]["n"] == 2 and lv["ttft_ms"]["p99"] == pytest.approx(100.0)
    assert lv["itl_ms"]["n"] == 8 and lv["itl_ms"]["mean"] == pytest.approx(10.0)
    assert lv["warmup"] == {"completed": 1, "failed": 0}
    assert lv["queue_ms"]["n"] == 5 and lv["queue_ms"]["p50"] == pytest.approx(0.1)
    assert lv["output_tokens"] == 10


def test_slo_parsing_and_per_request_goodput():
    assert metrics.parse_slo("ttft_p99_ms=800,itl_p99_ms=50,tpot_ms=40") == \
        {"ttft_p99_ms": 800.0, "itl_p99_ms": 50.0, "tpot_ms": 40.0}
    for bad in ("ttft=800", "latency_ms=3", "ttft_ms=-1", "ttft_ms=abc", "ttft_ms"):
        with pytest.raises(metrics.SLOError):
            metrics.parse_slo(bad)
    fast, slow = _rec(ttft_us=100_000), _rec(ttft_us=900_000, sent=5)
    lv = metrics.summarize_level([fast, slow], slo={"ttft_p99_ms": 800})
    assert lv["goodput_fraction"] == 0.5
    assert lv["goodput_request_s"] == pytest.approx(lv["request_s"] / 2, rel=1e-3)
    assert lv["slo_met"] is False  # the level's p99 TTFT is ~892 ms


def test_knee_is_the_level_before_latency_outgrows_throughput():
    def lv(c, e2e, tok):
        return {"concurrency": c, "e2e_ms": {"p50": e2e}, "output_tok_s": tok, "complete": True}
    levels = [lv(1, 100, 50), lv(16, 120, 700), lv(64, 400, 900)]
    metrics.mark_knee(levels)
    assert [x["knee"] for x in levels] == [False, True, False]
    assert levels[2]["latency_growth"] == pytest.approx(400 / 120, abs=1e-3)
    assert levels[2]["throughput_growth"] == pytest.approx(900 / 700, abs=1e-3)


def test_a_level_cut_short_is_not_part_of_the_knee():
    # c=16 was cut by the time limit: its numbers say nothing about the server, so the step that
    # counts is c=1 -> c=64 (latency x2, throughput x10: no knee there)
    def lv(c, e2e, tok, complete=True):
        return {"concurrency": c, "e2e_ms": {"p50": e2e}, "output_tok_s": tok, "complete": complete}
    sweep = [lv(1, 100, 50), lv(16, 900, 60, complete=False), lv(64, 200, 500)]
    assert metrics.knee_index(sweep) is None
    sweep[1]["complete"] = True
    assert metrics.knee_index(sweep) == 0  # latency x9, throughput x1.2


def test_decode_rate_of_one_stream_is_1000_over_median_tpot():
    assert metrics.decode_tok_s({"tpot_ms": {"p50": 8.0}, "output_tok_s": 99.0}) == 125.0
    # no TPOT (one-chunk answers): no decode rate, never the level's output_tok_s instead
    assert metrics.decode_tok_s({"tpot_ms": {"p50": None}, "output_tok_s": 99.0}) is None


def test_a_completed_response_without_any_token_is_failed_as_empty():
    # e.g. a server that ignored stream: true and answered with one JSON body
    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                    "finish_reason": "stop"}]}).encode() + b"\n"
    rec, p = parse([(body, 5)])
    assert p.complete() and not rec.ok and rec.error == "empty"
    assert metrics.ttft_ms(rec.to_dict()) is None
