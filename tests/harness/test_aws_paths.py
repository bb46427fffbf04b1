"""The trial's SageMaker path through moto's invoke_endpoint, the Bedrock path and the scoreboard
through an injected bedrock-runtime client (botocore cannot stub event streams), and the
no-credentials run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import requests
from botocore.exceptions import ClientError
from moto import mock_aws

from harness.agent.providers import build_model
from harness.agent.scoreboard import format_board, run_scoreboard
from harness.agent.trial import run_trial
from harness.endpoint import Endpoint
from tests.harness.fake_openai import FakeOpenAI, text_only
from tests.harness.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def _completion(message: dict, finish: str) -> dict:
    return {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 9, "total_tokens": 69}}


def test_sagemaker_path_through_moto_invoke_endpoint(fake_aws, tmp_path):
    tool_call = {"content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "count_ids", "arguments": json.dumps({"filters": ["id >= 10"]})}}]}
    with mock_aws():
        requests.post("http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results", json={
            "region": "us-east-1", "results": [
                {"Body": json.dumps(_completion(tool_call, "tool_calls")), "ContentType": "application/json"},
                {"Body": json.dumps(_completion({"content": "8 records.\nAnswer: 8"}, "stop")),
                 "ContentType": "application/json"}]}).raise_for_status()
        ep = Endpoint("sagemaker", "sagemaker", "google/gemma-4-E2B-it-qat-w4a16-ct", region="us-east-1",
                      endpoint_name="kit-sagemaker-g6")
        [rec] = run_trial([ep], runs=1, out_path=tmp_path / "a.jsonl", echo=lambda s: None,
                          model_factory=lambda e: build_model(e, boto_session=boto3.Session(region_name="us-east-1")))
    assert rec.ok and rec.quoted == 8 and rec.filters == ["id >= 10"] and rec.protocol == "sagemaker"
    assert rec.output_tokens == 18 and rec.input_tokens == 120  # server usage, summed over both calls


class FakeBedrockRuntime:
    """converse_stream driven by a script: list of replies, each a list of Converse stream events
    or an exception to raise."""

    class meta:  # noqa: N801 - mirrors botocore's client.meta
        region_name = "us-east-1"

    def __init__(self, script):
        self.script, self.requests = script, []

    def converse_stream(self, **request):
        self.requests.append(request)
        reply = self.script(request, len(self.requests) - 1)
        if isinstance(reply, Exception):
            raise reply
        return {"stream": iter(reply)}


def tool_use(calls: list[tuple[str, dict]]) -> list[dict]:
    ev = [{"messageStart": {"role": "assistant"}}]
    for i, (name, args) in enumerate(calls):
        ev += [{"contentBlockStart": {"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": f"t{i}", "name": name}}}},
               {"contentBlockDelta": {"contentBlockIndex": i, "delta": {"toolUse": {"input": json.dumps(args)}}}},
               {"contentBlockStop": {"contentBlockIndex": i}}]
    return ev + [{"messageStop": {"stopReason": "tool_use"}},
                 {"metadata": {"usage": {"inputTokens": 40, "outputTokens": 12, "totalTokens": 52},
                               "metrics": {"latencyMs": 100}}}]


def text(t: str) -> list[dict]:
    return [{"messageStart": {"role": "assistant"}},
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": t}}},
            {"contentBlockStop": {"contentBlockIndex": 0}}, {"messageStop": {"stopReason": "end_turn"}},
            {"metadata": {"usage": {"inputTokens": 70, "outputTokens": 6, "totalTokens": 76}, "metrics": {"latencyMs": 80}}}]


def _throttle() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Too many requests"}}, "ConverseStream")


def _has_tool_result(request) -> bool:
    return any("toolResult" in c for m in request["messages"] for c in m["content"])


def test_bedrock_path_with_injected_client_and_throttling(fake_aws, tmp_path):
    def script(request, n):
        if n == 0:
            return _throttle()  # backed off and retried, counted
        if not _has_tool_result(request):
            return tool_use([("count_ids", {"filters": ["id >= 10"]})])
        return text("There are 8.\nAnswer: 8")

    client = FakeBedrockRuntime(script)
    ep = Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1")
    [rec] = run_trial([ep], runs=1, echo=lambda s: None, retry_initial_delay=0.05,
                      model_factory=lambda e: build_model(e, client=client))
    assert rec.ok and rec.throttled == 1 and rec.filters == ["id >= 10"]
    assert client.requests[0]["modelId"] == "us.amazon.nova-micro-v1:0"
    assert client.requests[0]["toolConfig"]["tools"][0]["toolSpec"]["name"] == "count_ids"
    assert rec.output_tokens == 18


def test_bedrock_throttled_past_retries_is_recorded(fake_aws):
    client = FakeBedrockRuntime(lambda r, n: _throttle())
    ep = Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1")
    [rec] = run_trial([ep], runs=1, echo=lambda s: None, retry_initial_delay=0.01, retry_attempts=3,
                      model_factory=lambda e: build_model(e, client=client))
    assert not rec.ok and "ModelThrottledException" in rec.error and rec.throttled == 3
    assert len(client.requests) == 3


def test_scoreboard_table_sorted_by_code(fake_aws):
    slow = FakeOpenAI(text_only("Paris, the capital."), token_delay=0.08).start()
    fast = FakeOpenAI(text_only("Paris")).start()
    down = free_port()
    eps = [Endpoint("slow", "openai", "m", label="slow server", base_url=slow.base_url),
           Endpoint("down", "openai", "m", label="down server", base_url=f"http://127.0.0.1:{down}/v1"),
           Endpoint("fast", "openai", "m", label="fast server", base_url=fast.base_url),
           Endpoint("idle", "openai", "m", label="never called", base_url=fast.base_url)]

    def script(request, n):
        if not _has_tool_result(request):
            q = "What is the capital of France? Answer in one word."
            return tool_use([("ask_slow", {"question": q}), ("ask_down", {"question": q}),
                             ("ask_fast", {"question": q})])
        return text("| down | Paris | 0.001 | 999 |")  # the model's own table is ignored

    try:
        orchestrator = build_model(Endpoint("scoreboard", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1"),
                                   client=FakeBedrockRuntime(script))
        board = run_scoreboard(eps, orchestrator=orchestrator, timeout=10,
                               model_factory=lambda e: build_model(e, timeout=5))
    finally:
        slow.stop()
        fast.stop()
    rows = board["rows"]
    by = {r["backend"]: r for r in rows}
    # What is deterministic: the measured rows come first, by the seconds this code measured
    # (which of slow and fast answers first depends on the machine's load, so the test asserts
    # the order of the measured seconds, not the names); failed, then uncalled, rows follow.
    assert {r["backend"] for r in rows[:2]} == {"fast", "slow"}
    assert rows[0]["seconds"] <= rows[1]["seconds"]
    assert [r["backend"] for r in rows[2:]] == ["down", "idle"]
    assert by["fast"]["answer"] == "Paris" and by["slow"]["answer"] == "Paris, the capital."
    assert by["slow"]["output_tokens"] == 3  # the server's usage, not the model's say-so
    assert by["slow"]["wall_tok_s"] == round(3 / by["slow"]["seconds"], 1)
    assert by["slow"]["seconds"] >= 0.2  # three pieces, each after a 0.08 s sleep: a measured wait
    assert by["down"]["error"] and by["idle"]["error"] == "not called by the orchestrating agent"
    assert by["down"]["seconds"] is not None and by["idle"]["seconds"] is None
    table = format_board(board).splitlines()
    assert table[0] == "| backend | answer | seconds | tok/s (wall) |"
    assert [line.split(" | ")[0].lstrip("| ") for line in table[2:]] == [r["label"] for r in rows]
    assert table[2 + rows.index(by["fast"])].startswith("| fast server | Paris |")
    assert table[4] == "| down server | error: " + by["down"]["error"] + " | — | — |"


def test_no_credentials_prints_plan_and_exits_0(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    code = ("import runpy, sys; sys.argv=['harness.run']\n"
            "try:\n    runpy.run_module('harness.run', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'torch', 'constructs'))\n"
            "print('HEAVY', bad); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert any(ln.startswith("g6 ") for ln in lines) and any(ln.startswith("inf2 ") for ln in lines)
    needs = [ln for ln in lines if ln.startswith("harness.run: nothing measured: needs AWS credentials")]
    assert len(needs) == 1
    assert lines[-1] == "HEAVY []"


def test_models_follow_the_endpoint_region(fake_aws):
    s = boto3.Session(region_name="us-east-1")
    sm = build_model(Endpoint("sagemaker", "sagemaker", "m", region="us-west-2", endpoint_name="e"), boto_session=s)
    br = build_model(Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", region="eu-west-1"), boto_session=s)
    same = build_model(Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1"), boto_session=s)
    assert (sm.client.meta.region_name, br.client.meta.region_name, same.client.meta.region_name) == \
        ("us-west-2", "eu-west-1", "us-east-1")
    assert s.region_name == "us-east-1"  # the run's session is left alone
