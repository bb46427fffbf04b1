"""Answer extraction, the SageMaker and Bedrock ask functions (clients injected), the local
OpenAI gateway, and the echo probe."""
from __future__ import annotations

import io
import json
import urllib.request

import pytest

from harness.accuracy.client import BackendDown, ItemFailed, Settings, Target, bedrock_ask, sagemaker_ask
from harness.accuracy.gateway import openai_gateway
from harness.accuracy.items import Item, extract, normalize, score
from harness.accuracy.lmeval import serves_echo
from harness.endpoint import Endpoint
from tests.accuracy.scripted import ScriptedServer, numbered


@pytest.mark.parametrize("reply,kind,want", [
    ("Step 1: 3 + 4 = 7.\nAnswer: 7", "number", "7"),
    ("Answer: 1,234.50", "number", "1234.5"),
    ("The answer is $42.", "number", "42"),
    ("I think 12, no wait, 13", "number", "13"),
    ("Answer: -3", "number", "-3"),
    ("Answer: 007", "number", "7"),
    ("no number here", "number", None),
    ("Option B fits best.\nAnswer: (C)", "letter", "C"),
    ("I would pick D", "letter", "D"),
    ("I am not sure", "letter", None),  # a stray "I" is not an option letter
    ("answer: b", "letter", None),
])
def test_extract(reply, kind, want):
    assert extract(reply, kind) == want


def test_score_compares_normalized_answers():
    item = Item("items", "1", "q", "1,000")
    assert score(item, "Answer: 1000.0") == ("1000", True)
    assert score(item, "Answer: 100") == ("100", False)
    assert score(Item("items", "2", "q", "c"), "Answer: C") == ("C", True)
    assert normalize("many words") is None


class FakeSageMaker:
    def __init__(self, reply=None, error=None):
        self.reply, self.error, self.calls = reply, error, []

    def invoke_endpoint(self, **kw):
        self.calls.append(kw)
        if self.error:
            raise self.error
        return {"Body": io.BytesIO(json.dumps(self.reply).encode())}


class ClientError(Exception):
    def __init__(self, code, status):
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


EP_SM = Endpoint("sagemaker", "sagemaker", "google/gemma", endpoint_name="ep-1", region="us-east-1")
EP_BR = Endpoint("bedrock", "bedrock", "amazon.nova-micro-v1:0", region="us-east-1")
S = Settings(seed=7, max_tokens=99, retries=1, retry_base_s=0.0)


def test_sagemaker_ask_sends_the_openai_body():
    fake = FakeSageMaker({"choices": [{"message": {"content": "Answer: 4"}}]})
    assert sagemaker_ask(EP_SM, S, fake)([{"role": "user", "content": "2+2?"}]) == "Answer: 4"
    sagemaker_ask(EP_SM, S, fake)([{"role": "user", "content": "2+2?"}], max_tokens=7)
    assert json.loads(fake.calls.pop()["Body"])["max_tokens"] == 7
    [kw] = fake.calls
    body = json.loads(kw["Body"])
    assert kw["EndpointName"] == "ep-1" and kw["ContentType"] == "application/json"
    assert body == {"model": "google/gemma", "messages": [{"role": "user", "content": "2+2?"}],
                    "temperature": 0, "seed": 7, "max_tokens": 99, "stream": False}


def test_sagemaker_errors_split_item_and_backend():
    bad = FakeSageMaker(error=ClientError("ValidationError", 400))
    with pytest.raises(ItemFailed):
        sagemaker_ask(EP_SM, S, bad)([{"role": "user", "content": "x"}])
    assert len(bad.calls) == 1  # a client error is not retried
    down = FakeSageMaker(error=ClientError("ThrottlingException", 400))
    with pytest.raises(BackendDown):
        sagemaker_ask(EP_SM, S, down)([{"role": "user", "content": "x"}])
    assert len(down.calls) == 2  # retried once, then the backend is down


def test_bedrock_ask_uses_converse_greedy():
    calls = []

    class FakeBedrock:
        def converse(self, **kw):
            calls.append(kw)
            return {"output": {"message": {"content": [{"text": "Answer: "}, {"text": "5"}]}}}

    ask = bedrock_ask(EP_BR, S, FakeBedrock())
    assert ask([{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3?"}]) == "Answer: 5"
    assert calls[0] == {"modelId": "amazon.nova-micro-v1:0",
                        "messages": [{"role": "user", "content": [{"text": "2+3?"}]}],
                        "inferenceConfig": {"maxTokens": 99, "temperature": 0},
                        "system": [{"text": "be brief"}]}


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_gateway_serves_chat_completions_for_any_target():
    seen, budgets = [], []

    def ask(msgs, max_tokens=None):
        seen.append(msgs)
        budgets.append(max_tokens)
        if msgs[-1]["content"] == "fail":
            raise ItemFailed("nope")
        if msgs[-1]["content"] == "down":
            raise BackendDown("gone")
        return "Answer: 9"

    t = Target("bedrock", "m", "bedrock", ask)
    with openai_gateway(t) as g:
        assert g.base_url.startswith("http://127.0.0.1:") and g.completions_echo is False
        status, body = _post(g.base_url + "/chat/completions", {
            "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stop": ["Q:"], "max_tokens": 5})
        assert status == 200 and body["choices"][0]["message"]["content"] == "Answer: 9"
        assert seen[0] == [{"role": "user", "content": "hi"}] and budgets[0] == 5  # the request's budget
        assert _post(g.base_url + "/chat/completions", {"messages": [{"role": "user", "content": "fail"}]})[0] == 400
        assert _post(g.base_url + "/chat/completions", {"messages": [{"role": "user", "content": "down"}]})[0] == 503
        assert _post(g.base_url + "/completions", {"prompt": "x"})[0] == 404
        with urllib.request.urlopen(g.base_url + "/models", timeout=10) as r:
            assert json.loads(r.read())["data"][0]["id"] == "m"
    assert t.base_url is None  # the target itself is unchanged


def test_echo_probe():
    chat_only, echo = ScriptedServer(numbered(set())), ScriptedServer(numbered(set()), echo_logprobs=True)
    try:
        assert serves_echo(chat_only.url, "m") is False
        assert serves_echo(echo.url, "m") is True
        assert serves_echo(None, "m") is False
        body = echo.bodies[-1]
        assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1
    finally:
        chat_only.stop(), echo.stop()
