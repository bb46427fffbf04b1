"""Tool calling through the server: tools rendered into the Gemma 4 template, the model's
call syntax turned into OpenAI tool_calls (streamed and not), and a Strands agent that calls a
@tool and finishes, against a scripted generator emitting Gemma 4's real format."""
from __future__ import annotations

import json

import openai
import pytest

from ami.neuron.toolcalls import CALL_START

from .conftest import InProcessServer
from .scripted import ScriptedGenerator

RECORD_IDS = [3, 7, 9, 11, 12, 15, 18, 21, 24, 27, 30]
CALL_ARGS = {"filter": "id >= 10", "ids": RECORD_IDS}
TOOLS = [{"type": "function", "function": {
    "name": "count_ids", "description": "Count the ids matching a filter like 'id >= 10'.",
    "parameters": {"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "integer"}},
        "filter": {"type": "string", "description": "<field> <op> <integer>"}},
        "required": ["ids", "filter"]}}}]
QUESTION = f"Of these 11 ids {RECORD_IDS}, how many are >= 10?"


@pytest.fixture()
def server(tiny_tokenizer):
    gen = ScriptedGenerator(tiny_tokenizer, "count_ids", CALL_ARGS, preamble="Let me count. ")
    with InProcessServer(gen) as srv:
        srv.generator = gen
        yield srv


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=30)


def test_tools_are_declared_in_the_gemma4_system_turn(server):
    client(server).chat.completions.create(model="scripted-gemma4", tools=TOOLS, messages=[
        {"role": "system", "content": "Answer with a number."}, {"role": "user", "content": QUESTION}])
    prompt = server.generator.prompts[0]
    assert prompt.startswith("<bos><|turn>system\nAnswer with a number.<|tool>declaration:count_ids{")
    assert "description:<|\"|>Count the ids matching a filter like 'id >= 10'.<|\"|>" in prompt
    assert "ids:{items:{type:<|\"|>INTEGER<|\"|>},type:<|\"|>ARRAY<|\"|>}" in prompt
    assert "required:[<|\"|>ids<|\"|>,<|\"|>filter<|\"|>]" in prompt
    assert prompt.endswith(f"<tool|><turn|>\n<|turn>user\n{QUESTION}<turn|>\n<|turn>model\n")


def test_non_streamed_tool_call(server):
    r = client(server).chat.completions.create(model="scripted-gemma4", tools=TOOLS,
                                               messages=[{"role": "user", "content": QUESTION}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me count. "
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "count_ids" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == CALL_ARGS
    assert r.usage.completion_tokens > 10


def test_streamed_tool_call_and_follow_up(server):
    c = client(server)
    chunks = list(c.chat.completions.create(model="scripted-gemma4", tools=TOOLS, stream=True,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": QUESTION}]))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert content == "Let me count. " and CALL_START not in content
    assert [d.index for d in deltas] == [0] and deltas[0].function.name == "count_ids"
    assert json.loads(deltas[0].function.arguments) == CALL_ARGS
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens > 10

    # Second turn, as an OpenAI client sends it: the call, then its result.
    history = [{"role": "user", "content": QUESTION},
               {"role": "assistant", "content": None, "tool_calls": [{
                   "id": deltas[0].id, "type": "function",
                   "function": {"name": "count_ids", "arguments": deltas[0].function.arguments}}]},
               {"role": "tool", "tool_call_id": deltas[0].id, "content": "8"}]
    r = c.chat.completions.create(model="scripted-gemma4", tools=TOOLS, messages=history)
    assert r.choices[0].message.content == "The count_ids tool says 8, so the answer is 8."
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    # The result went back in Gemma 4's own framing, inside the same model turn.
    assert server.generator.prompts[-1].endswith(
        '<|turn>model\n<|tool_call>call:count_ids{filter:<|"|>id >= 10<|"|>,ids:[3,7,9,11,12,15,18,21,24,27,30]}'
        '<tool_call|><|tool_response>response:count_ids{value:<|"|>8<|"|>}<tool_response|>')


def test_without_tools_the_call_syntax_is_plain_text(server):
    r = client(server).chat.completions.create(model="scripted-gemma4", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content.startswith("Let me count. <|tool_call>call:count_ids{")


def test_strands_agent_calls_the_tool_and_finishes(server):
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    calls = []

    @tool
    def count_ids(ids: list[int], filter: str) -> int:
        """Count the ids matching a filter such as 'id >= 10'.

        Args:
            ids: the ids to look at
            filter: '<field> <op> <integer>'
        """
        calls.append((ids, filter))
        assert filter == "id >= 10"
        return sum(1 for i in ids if i >= 10)

    model = OpenAIModel(client_args={"base_url": server.url + "/v1", "api_key": "x", "max_retries": 0},
                        model_id="scripted-gemma4", params={"max_tokens": 256, "temperature": 0})
    agent = Agent(model=model, tools=[count_ids], callback_handler=None)
    result = agent(QUESTION)

    assert calls == [(RECORD_IDS, "id >= 10")]
    assert "the answer is 8" in str(result)
    assert result.stop_reason == "end_turn"
    # Strands streamed both turns with usage; the second prompt carried the tool's result.
    assert len(server.generator.prompts) == 2
    assert "<|tool_response>response:count_ids{value:" in server.generator.prompts[1]
    assert result.metrics.accumulated_usage["outputTokens"] > 0


def test_call_ended_by_end_of_turn_instead_of_its_marker(tiny_tokenizer):
    gen = ScriptedGenerator(tiny_tokenizer, "count_ids", CALL_ARGS, end="<turn|>")
    with InProcessServer(gen) as srv:
        chunks = list(client(srv).chat.completions.create(
            model="scripted-gemma4", tools=TOOLS, stream=True, messages=[{"role": "user", "content": QUESTION}]))
    deltas = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [json.loads(d.function.arguments) for d in deltas] == [CALL_ARGS]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == ""
