"""Gemma 4's thought channel goes to reasoning_content, never into the answer, under any chunking."""
from __future__ import annotations

import json

import openai

from ami.neuron.reasoning import ThoughtStream
from ami.neuron.toolcalls import CALL_END

from .conftest import InProcessServer
from .scripted import ScriptedGenerator

TEXT = "<|channel>thought\nThe ids >= 10 are 8 of them; <channel should not confuse.<channel|>The answer is 8. <|chan"


def run(chunks):
    s = ThoughtStream()
    content, reasoning = "", ""
    for c in chunks:
        a, b = s.feed(c)
        content, reasoning = content + a, reasoning + b
    a, b = s.finish()
    return content + a, reasoning + b


def test_whole_and_every_split():
    expected = ("The answer is 8. <|chan", "The ids >= 10 are 8 of them; <channel should not confuse.")
    assert run([TEXT]) == expected
    for i in range(len(TEXT) + 1):
        for j in range(i, len(TEXT) + 1, 2):
            assert run([TEXT[:i], TEXT[i:j], TEXT[j:]]) == expected, (i, j)


def test_no_channel_is_all_content_and_an_unfinished_thought_stays_reasoning():
    assert run(["plain < answer |>"]) == ("plain < answer |>", "")
    assert run(["<|channel>thought\nstill think", "ing"]) == ("", "still thinking")
    assert run(["<|channel><channel|>x"]) == ("x", "")


def test_server_returns_thoughts_as_reasoning_and_calls_after_them(tiny_tokenizer):
    args = {"filter": "id >= 10"}
    gen = ScriptedGenerator(tiny_tokenizer, "count_ids", args,
                            preamble="<|channel>thought\nI should count.<channel|>", end=CALL_END + "<|tool_response>")
    tools = [{"type": "function", "function": {"name": "count_ids", "parameters": {"type": "object"}}}]
    with InProcessServer(gen) as srv:
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=30)
        msgs = [{"role": "user", "content": "count"}]
        whole = c.chat.completions.create(model="scripted-gemma4", tools=tools, messages=msgs)
        chunks = list(c.chat.completions.create(model="scripted-gemma4", tools=tools, messages=msgs, stream=True))
    msg = whole.choices[0].message
    assert msg.content is None and msg.model_extra["reasoning_content"] == "I should count."
    assert json.loads(msg.tool_calls[0].function.arguments) == args
    streamed = "".join((ch.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for ch in chunks)
    assert streamed == "I should count."
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == ""
