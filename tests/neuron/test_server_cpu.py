"""The real CLI (``python -m ami.neuron.server --device cpu --tiny-random``) driven by the
OpenAI client: streaming with usage, non-streaming, limits, concurrency and batching."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import openai
import pytest

MODEL = "tiny-random-gemma4"
HELLO = [{"role": "user", "content": "Hello there, who are you?"}]


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=5) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server + "/v1", api_key="x", max_retries=0, timeout=60)


def test_models_and_health(client, tiny_server):
    assert [m.id for m in client.models.list().data] == [MODEL]
    h = health(tiny_server)
    assert h["status"] == "ok" and h["device"] == "cpu"
    assert h["limits"] == {"max_prompt_tokens": 256, "max_total_tokens": 512, "max_batch_size": 4}


def test_non_streaming_reports_server_token_counts(client):
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=9, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.object == "chat.completion" and r.model == MODEL
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 9 and r.usage.total_tokens == r.usage.prompt_tokens + 9
    assert r.usage.prompt_tokens > 5


def test_streaming_with_usage_matches_non_streaming(client):
    kwargs = dict(model=MODEL, messages=HELLO, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: same tokens either way
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_usage_sends_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3, stream=True,
                                                 extra_body={"ignore_eos": True}))
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_prompt_over_the_largest_bucket_is_a_400_naming_the_limit(client):
    long = [{"role": "user", "content": "word " * 400}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=long, max_tokens=4)
    err = e.value.body
    assert err["code"] == "prompt_too_long" and err["param"] == "messages"
    assert "at most 256 tokens" in err["message"]


def test_prompt_plus_max_tokens_over_the_total_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=510)
    assert e.value.body["code"] == "total_length_exceeded"
    assert "compiled total length of 512 tokens" in e.value.body["message"]


@pytest.mark.parametrize("bad, field", [
    ({"n": 0}, "n"), ({"n": True}, "n"), ({"stop": [""]}, "stop"), ({"stop": 5}, "stop"),
    ({"temperature": 3}, "temperature"),
    ({"tool_choice": "required"}, "tool_choice"), ({"max_tokens": 0}, "max_tokens"),
    ({"seed": "7"}, "seed"), ({"seed": 2**63}, "seed"), ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"), ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"), ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"top_k": -2}, "top_k"), ({"logit_bias": {"999999": 1}}, "logit_bias"), ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"stream_options": {"include_usage": True}}, "stream_options"), ({"tools": []}, "tools"),
    ({"include_stop_str_in_output": "yes"}, "include_stop_str_in_output"),
    ({"response_format": {"type": "json_schema"}}, "response_format"), ({"top_p": 0}, "top_p"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0]"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": 5}, {"role": "user", "content": "y"}]},
     "messages[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}]},
     "tools[0].function.parameters"),  # as OpenAI names it (ami/neuron/api.py)
])
def test_unsupported_or_invalid_fields_are_refused(client, bad, field):
    # vLLM's extensions are not the SDK's parameters: they go in extra_body, as clients send them
    extra = {k: bad.pop(k) for k in ("repetition_penalty", "top_k", "include_stop_str_in_output") if k in bad}
    args = {"model": MODEL, "messages": HELLO, "max_tokens": 2, **bad, "extra_body": extra}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**args)
    assert e.value.body["param"] == field


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=2)


def test_concurrent_requests_are_all_answered_and_batched(tiny_server):
    before = health(tiny_server)["scheduler"]

    async def main():
        ac = openai.AsyncOpenAI(base_url=tiny_server + "/v1", api_key="x", max_retries=0, timeout=60)

        async def one(i: int, stream: bool):
            msgs = [{"role": "user", "content": f"request number {i}"}]
            kw = dict(model=MODEL, messages=msgs, max_tokens=8 + i, temperature=0.7,
                      extra_body={"ignore_eos": True})
            if not stream:
                return (await ac.chat.completions.create(**kw)).usage.completion_tokens
            s = await ac.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
            return [c async for c in s][-1].usage.completion_tokens

        try:
            return await asyncio.gather(*(one(i, i % 2 == 0) for i in range(6)))
        finally:
            await ac.close()

    counts = asyncio.run(main())
    assert counts == [8 + i for i in range(6)]
    after = health(tiny_server)["scheduler"]
    assert after["admitted"] - before["admitted"] == 6 and after["finished"] - before["finished"] == 6
    assert 2 <= after["max_batch_size_seen"] <= 4  # decoded together, never beyond the compiled size
    assert max(int(k) for k in after["batch_sizes"]) <= 4
    assert after["queued"] == 0 and after["live_slots"] == 0 and after["slots"] == 4
    assert after["timings"]["decode_step"]["count"] > 0 and after["timings"]["prefill"]["p50_ms"] > 0
