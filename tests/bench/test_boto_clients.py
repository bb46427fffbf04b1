"""SageMaker and Bedrock bench clients driven by injected boto3 clients that return real botocore event
streams (tests/bench/fake_aws.py): parsing, timing, usage, throttling retries, mid-stream errors."""
from __future__ import annotations

import asyncio
import json

import pytest

from harness.bench import metrics
from harness.bench.api import run_bench
from harness.bench.spec import BenchSpec
from harness.bench.clients.bedrock import BedrockClient
from harness.bench.clients.boto import Retry
from harness.bench.clients.sagemaker import SageMakerClient
from harness.bench.profiles import BenchRequest
from harness.bench.record import Record
from harness.endpoint import Endpoint
from tests.bench.fake_aws import FakeBedrock, FakeSageMaker

REQ = BenchRequest(prompt="hello there", max_tokens=8, system="be brief")


def stream(backend, req=REQ) -> dict:
    async def go():
        await backend.start(4)
        rec = Record("t-1", {})
        await backend.stream(req, rec)
        await backend.close()
        return rec.to_dict()
    return asyncio.run(go())


def assert_first_token_while_holding(d: dict, raw, k: int) -> None:
    """The client stamped its first token while it held event ``k``: not before the fake handed
    that event over, not after it asked for the next one (the fake's own record, so a busy
    machine cannot fail this; an off-by-one event or a late stamp does)."""
    t = d["t_sent_ns"] + d["chunk_us"][0] * 1000  # chunk_us is floored to whole microseconds
    assert raw.sent_ns[k] <= t + 999, (raw.sent_ns[k] - t) / 1e6
    if k + 1 < len(raw.sent_ns):
        assert t < raw.sent_ns[k + 1], (t - raw.sent_ns[k + 1]) / 1e6


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def ch(text=None, usage=None, finish=None, role=False):
    o = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""} if role else {"content": text},
                      "finish_reason": finish}]}
    if usage is not None:
        o["usage"] = {"prompt_tokens": 9, "completion_tokens": usage, "total_tokens": 9 + usage}
    return o


def test_sagemaker_sse_lines_split_across_parts_and_several_per_part():
    body = (sse(ch(role=True, usage=0)) + sse(ch(" a", usage=1)) + sse(ch(" b c", usage=3))
            + sse(ch(" d", usage=4, finish="length")) + b"data: [DONE]\n\n")
    first_token = body.index(b" a") + 10  # part 0 ends inside the first token's line
    parts = [body[:first_token], body[first_token:first_token + 7], body[first_token + 7:]]
    fake = FakeSageMaker(parts, ttft=0.05, gap=0.02)
    d = stream(SageMakerClient("ep-1", "gemma", client=fake))
    assert d["ok"] and d["error"] is None
    assert d["chunk_tokens"] == [1, 2, 1] and d["output_tokens"] == 4 and d["prompt_tokens"] == 9
    # the first token's line ends only in part 2: TTFT is at least 50 + 20 + 20 ms, stamped with part 2
    assert metrics.ttft_ms(d) >= 90
    assert_first_token_while_holding(d, fake.streams[0], 2)
    sent = json.loads(fake.calls[0]["Body"])
    assert fake.calls[0]["EndpointName"] == "ep-1" and fake.calls[0]["ContentType"] == "application/json"
    assert sent["stream"] and sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_sagemaker_model_error_and_mid_stream_error_are_classified():
    d = stream(SageMakerClient("ep", "m", client=FakeSageMaker([], model_error=503)))
    assert (d["ok"], d["error"], d["http_status"]) == (False, "http_503", 503)
    parts = [sse(ch(" a")), sse(ch(" b")), sse(ch(" c", finish="stop"))]
    d = stream(SageMakerClient("ep", "m", client=FakeSageMaker(parts, stream_error_at=1)))
    assert (d["ok"], d["error"]) == (False, "stream_error") and len(d["chunk_us"]) == 1


def test_sagemaker_stream_that_just_ends_is_dropped():
    d = stream(SageMakerClient("ep", "m", client=FakeSageMaker([sse(ch(" a")), sse(ch(" b"))])))
    assert (d["ok"], d["error"]) == (False, "dropped")


def test_bedrock_deltas_usage_and_timing():
    fake = FakeBedrock(["Hel", "lo", " wor", "ld"], ttft=0.06, gap=0.01, output_tokens=5)
    d = stream(BedrockClient("us.amazon.nova-micro-v1:0", client=fake))
    assert d["ok"] and d["finish_reason"] == "max_tokens"
    assert d["output_tokens"] == 5 and d["output_tokens_source"] == "usage" and d["prompt_tokens"] == 11
    assert sum(d["chunk_tokens"]) == 5 and d["chunk_tokens_source"] == "usage_by_chars"
    assert metrics.ttft_ms(d) >= 55
    assert_first_token_while_holding(d, fake.streams[0], 1)  # event 0 is messageStart
    call = fake.calls[0]
    assert call["modelId"] == "us.amazon.nova-micro-v1:0" and call["system"] == [{"text": "be brief"}]
    assert call["inferenceConfig"]["maxTokens"] == 8


def test_bedrock_throttling_is_retried_with_backoff_and_recorded():
    fake = FakeBedrock(["a", "b"], ttft=0.0, gap=0.0, throttle_first=2)
    d = stream(BedrockClient("m", client=fake, retry=Retry(max_retries=3, base_s=0.01, cap_s=0.02)))
    assert d["ok"] and d["retries"] == 2 and len(fake.calls) == 3 and d["retry_wait_ms"] >= 0
    fake = FakeBedrock(["a"], throttle_first=10)
    d = stream(BedrockClient("m", client=fake, retry=Retry(max_retries=2, base_s=0.001, cap_s=0.002)))
    assert (d["ok"], d["error"], d["retries"]) == (False, "throttled", 2)


@pytest.mark.parametrize("event,cls", [("throttlingException", "throttled"),
                                       ("modelStreamErrorException", "stream_error")])
def test_bedrock_exception_event_mid_stream(event, cls):
    d = stream(BedrockClient("m", client=FakeBedrock(["a", "b", "c", "d"], fail_mid_stream=event)))
    assert (d["ok"], d["error"]) == (False, cls) and len(d["chunk_us"]) == 2


def test_bedrock_through_the_whole_benchmark(tmp_path):
    fake = FakeBedrock(["x"] * 6, ttft=0.02, gap=0.004)
    levels = run_bench(Endpoint(name="bedrock", protocol="bedrock", model_id="m", region="us-east-1"),
                       BenchSpec(profile="agent", concurrency=(1, 3), requests=3, progress=False, time_limit=30),
                       out_dir=tmp_path, client=fake)
    assert [lv["completed"] for lv in levels] == [3, 3]
    assert levels[1]["ttft_ms"]["p50"] >= 20  # the fake sleeps 20 ms before the first delta
    recs = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    by_thread = {raw.thread: raw for raw in fake.streams}
    assert len(recs) == len(fake.streams) == len(by_thread)  # one call per request, warm-ups too
    for r in recs:
        assert_first_token_while_holding(r, by_thread[f"bench-{r['id']}"], 1)
    assert all(lv["token_sources"] == {"usage": 3} for lv in levels)


def test_sagemaker_without_a_model_name_lets_the_container_pick_its_own():
    parts = [sse(ch(" a", finish="stop")) + b"data: [DONE]\n\n"]
    fake = FakeSageMaker(parts)
    d = stream(SageMakerClient("ep", "", client=fake))
    assert d["ok"] and "model" not in json.loads(fake.calls[0]["Body"])
