"""Structured output: response_format (json_object, json_schema) and tool_choice "required" or a
named function, enforced by llguidance as a logits mask (ami/neuron/structured.py).

The engine's model is random: whatever it writes is noise, so a valid answer here is the
constraint's doing alone. The schemas are small and bounded (short strings, integers in a range,
enums), and max_tokens leaves room for the whitespace the flexible JSON grammar allows between
tokens (vLLM's default), so every answer ends with the stop token ("stop"), not "length".
"""
from __future__ import annotations

import asyncio
import json
import random

import openai
import pytest

from ami.neuron import structured

MODEL = "tiny-random-gemma4"
ASK = [{"role": "user", "content": "Give me JSON."}]
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "count": {"type": "integer", "minimum": 0, "maximum": 100},
                         "ok": {"type": "boolean"}},
          "required": ["name", "count", "ok"]}
TOOLS = [{"type": "function", "function": {"name": "pick", "parameters": {
             "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                              "ok": {"type": "boolean"}}, "required": ["n", "ok"]}}},
         {"type": "function", "function": {"name": "mode", "parameters": {
             "type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}}}]
CALL = [{"role": "user", "content": "Call a tool."}]


def valid_answer(obj) -> None:
    """SCHEMA, checked by hand (no JSON Schema validator among the kit's pins). No other keys:
    the engine closes objects with properties as vLLM's default (xgrammar) does."""
    assert isinstance(obj, dict) and set(obj) == {"name", "count", "ok"}, obj
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 8
    assert type(obj["count"]) is int and 0 <= obj["count"] <= 100
    assert isinstance(obj["ok"], bool)


def valid_args(name: str, args: dict) -> None:
    if name == "pick":
        assert set(args) == {"n", "ok"} and type(args["n"]) is int and 0 <= args["n"] <= 9, args
        assert isinstance(args["ok"], bool)
    else:
        assert name == "mode" and args == {"k": args["k"]} and args["k"] in ("a", "b"), args


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server + "/v1", api_key="x", max_retries=0, timeout=120)


def json_schema(schema=SCHEMA) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


# --- through the OpenAI SDK, against the CPU engine ----------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_schema_answers_parse_and_follow_the_schema(client, seed):
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=480, seed=seed,
                                       response_format=json_schema())
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice  # ended by the stop token the grammar allowed
    valid_answer(json.loads(choice.message.content))


def test_json_schema_streamed_answer_is_the_same_json(client):
    kw = dict(model=MODEL, messages=ASK, max_tokens=480, seed=5, response_format=json_schema())
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(**kw, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    valid_answer(json.loads(text))


def test_the_sdks_parse_helper_gets_its_pydantic_model_back(client):
    """What the OpenAI SDK sends for ``response_format=<a pydantic model>`` (its strict JSON
    Schema, titles and all) and reads back into the model."""
    from pydantic import BaseModel, Field

    class Answer(BaseModel):
        name: str = Field(max_length=8)
        count: int = Field(ge=0, le=100)
        ok: bool

    r = client.chat.completions.parse(model=MODEL, messages=ASK, max_tokens=480, seed=4, response_format=Answer)
    assert r.choices[0].finish_reason == "stop"
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Answer)
    valid_answer(parsed.model_dump())


def test_a_forced_tool_choice_wins_over_response_format(client):
    # vLLM: "tool_choice ... 'required' will override structured output json settings"
    r = client.chat.completions.create(model=MODEL, messages=CALL, tools=TOOLS, max_tokens=300, seed=2,
                                       tool_choice={"type": "function", "function": {"name": "mode"}},
                                       response_format={"type": "json_object"})
    (call,) = r.choices[0].message.tool_calls
    valid_args("mode", json.loads(call.function.arguments))


def test_json_object_answers_are_json_objects(client):
    # Any object: keys are free strings, which a random model may make long, so several seeds in
    # one request; every answer that ended is an object, and at least one did end.
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200, seed=0, n=6,
                                       response_format={"type": "json_object"})
    done = [c for c in r.choices if c.finish_reason == "stop"]
    assert done, [c.message.content[:80] for c in r.choices]
    for c in done:
        assert isinstance(json.loads(c.message.content), dict)
    for c in r.choices:
        assert c.finish_reason in ("stop", "length") and c.message.content.startswith("{")


def test_completions_take_response_format_as_vllm_does(client):
    r = client.completions.create(model=MODEL, prompt="JSON:", max_tokens=480, seed=0,
                                  extra_body={"response_format": json_schema()})
    assert r.choices[0].finish_reason == "stop"
    valid_answer(json.loads(r.choices[0].text))


def test_tool_choice_required_gives_tool_calls_as_vllm_does(client):
    r = client.chat.completions.create(model=MODEL, messages=CALL, tools=TOOLS, tool_choice="required",
                                       max_tokens=300, seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == ""  # vLLM: content or ""
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert isinstance(call.id, str) and call.id and call.type == "function"
        assert isinstance(call.function.arguments, str)
        valid_args(call.function.name, json.loads(call.function.arguments))
    ids = [c.id for c in choice.message.tool_calls]
    assert len(set(ids)) == len(ids)


def test_named_tool_choice_gives_one_call_of_that_function(client):
    r = client.chat.completions.create(model=MODEL, messages=CALL, tools=TOOLS, max_tokens=300, seed=2,
                                       tool_choice={"type": "function", "function": {"name": "pick"}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop"  # vLLM (and OpenAI): "stop" for a named tool choice
    assert choice.message.content == ""
    (call,) = choice.message.tool_calls
    assert call.function.name == "pick" and call.type == "function" and call.id
    valid_args("pick", json.loads(call.function.arguments))


@pytest.mark.parametrize("choice, finish", [
    ("required", "tool_calls"), ({"type": "function", "function": {"name": "mode"}}, "stop")])
def test_forced_tool_calls_stream_as_the_whole_answer(client, choice, finish):
    kw = dict(model=MODEL, messages=CALL, tools=TOOLS, tool_choice=choice, max_tokens=300, seed=3)
    whole = client.chat.completions.create(**kw).choices[0]
    calls: dict[int, dict] = {}
    finishes = []
    for chunk in client.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        assert not delta.content  # the role chunk's "" at most
        for tc in delta.tool_calls or []:
            if tc.id:  # a call opens with its id, type and name (OpenAI's stream shape)
                assert tc.index not in calls and tc.type == "function" and tc.function.name
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finishes.append(chunk.choices[0].finish_reason)
    assert finishes[-1] == finish and whole.finish_reason == finish
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls]
    for c in calls.values():
        valid_args(c["name"], json.loads(c["arguments"]))


@pytest.mark.parametrize("fmt, param", [
    (json_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
     "response_format.json_schema.schema"),
    (json_schema({"type": "objekt"}), "response_format.json_schema.schema"),
    (json_schema({"type": "string", "pattern": "(unclosed"}), "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema"),
    ({"type": "json_schema"}, "response_format"),
    ({"type": "xml"}, "response_format"),
    ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, "response_format.json_schema.name"),
])
def test_a_bad_response_format_is_a_400_naming_the_field(client, fmt, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, response_format=fmt)
    assert e.value.body["param"] == param, e.value.body


def test_a_schema_nested_too_deep_is_a_400_not_a_crash(client):
    deep: dict = {"type": "string"}
    for _ in range(200):
        deep = {"type": "array", "items": deep}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, response_format=json_schema(deep))
    assert e.value.body["param"] == "response_format.json_schema.schema"
    assert client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2).choices  # still serving


def test_plain_rows_beside_a_constrained_row_are_unchanged(client, tiny_server):
    """Greedy output of an unconstrained request is the same alone and sharing its decode steps
    with a constrained one (the mask touches only the rows that ask)."""
    plain = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about foxes."}],
                 max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
    alone = client.chat.completions.create(**plain).choices[0].message.content

    async def together():
        ac = openai.AsyncOpenAI(base_url=tiny_server + "/v1", api_key="x", max_retries=0, timeout=120)
        try:
            return await asyncio.gather(
                ac.chat.completions.create(**plain),
                ac.chat.completions.create(model=MODEL, messages=ASK, max_tokens=480, seed=0,
                                           response_format=json_schema()))
        finally:
            await ac.close()

    def batched() -> int:
        import urllib.request
        with urllib.request.urlopen(tiny_server + "/health") as r:
            sizes = json.load(r)["scheduler"]["batch_sizes"]
        return sum(v for k, v in sizes.items() if int(k) >= 2)

    before = batched()
    beside, constrained = asyncio.run(together())
    assert batched() > before  # they did share decode steps
    assert beside.choices[0].message.content == alone
    valid_answer(json.loads(constrained.choices[0].message.content))


# --- the pieces ---------------------------------------------------------------------------------

def test_the_forced_tool_schemas_are_vllms():
    """vllm/tool_parsers/utils.py get_json_schema_from_tools: named -> the function's parameters;
    required -> an array (minItems 1) of {name: enum [name], parameters} per tool, $defs lifted."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
                 "type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}, "$defs": {"X": {"type": "integer"}}}}},
             {"type": "function", "function": {"name": "g"}}]
    assert structured.tool_schema("g", tools) == {"type": "object", "properties": {}}
    assert structured.tool_schema("f", tools) == tools[0]["function"]["parameters"]
    assert structured.tool_schema("required", tools) == {
        "type": "array", "minItems": 1, "$defs": {"X": {"type": "integer"}},
        "items": {"type": "object", "anyOf": [
            {"properties": {"name": {"type": "string", "enum": ["f"]},
                            "parameters": {"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}}},
             "required": ["name", "parameters"]},
            {"properties": {"name": {"type": "string", "enum": ["g"]},
                            "parameters": {"type": "object", "properties": {}}},
             "required": ["name", "parameters"]}]}}
    assert "$defs" in tools[0]["function"]["parameters"]  # the request's own tools are untouched


def test_objects_with_properties_are_closed_as_vllms_guidance_option_does():
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}},
                                               "c": {"type": "object", "additionalProperties": True,
                                                     "properties": {}}},
              "items": [{"properties": {}}], "$defs": {"D": {"properties": {}}}}
    out = structured.closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"]["additionalProperties"] is True  # said otherwise: kept
    assert out["items"][0]["additionalProperties"] is False and out["$defs"]["D"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # a copy
    assert structured.closed({"type": "object"}) == {"type": "object"}  # json_object: any object


def test_required_calls_come_out_whole_however_the_text_is_cut():
    text = '[ {"name": "pick", "parameters": {"n": 3, "ok": true}},\n {"name":"mode","parameters":{"k":"b \\" }"}}]'
    want = [("pick", '{"n": 3, "ok": true}'), ("mode", '{"k": "b \\" }"}')]
    rng = random.Random(0)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), 6))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        fc = structured.ForcedCalls("required")
        events = [e for p in parts for e in fc.feed(p)] + fc.finish()
        assert [(e.name, e.arguments) for e in events] == want
        assert [e.index for e in events] == [0, 1] and fc.calls == 2 and fc.finish_reason == "tool_calls"


def test_a_named_call_streams_its_arguments_as_generated():
    fc = structured.ForcedCalls("pick")
    first, = fc.feed('{"n"')
    assert (first.index, first.name, first.arguments) == (0, "pick", '{"n"')
    assert fc.feed(": 1}") == [structured.ArgumentsDelta(0, ": 1}")]
    assert fc.finish_reason == "stop" and fc.calls == 1


def test_the_mask_allows_the_stop_tokens_exactly_when_the_json_is_complete(tiny_tokenizer):
    """A random walk over what the mask allows always spells valid JSON, and the chat's stop ids
    are allowed only once it is complete."""
    from ami.neuron.chat import ChatFormat

    chat = ChatFormat.for_tokenizer(tiny_tokenizer)
    compiled = structured.compile_spec(structured.Spec(SCHEMA, "x"), chat)
    stops = sorted(chat.stop_ids)
    for seed in range(5):
        rng, out, c = random.Random(seed), [], compiled()
        while True:
            mask = c(out)
            assert mask.dtype.is_floating_point is False and mask.shape[0] == len(tiny_tokenizer)
            allowed = mask.nonzero().flatten().tolist()
            text = tiny_tokenizer.decode(out)
            complete = _parses(text)
            assert bool(mask[stops].any()) == complete, text
            if complete:
                valid_answer(json.loads(text))
                assert set(allowed) <= set(stops)  # nothing may follow the closing brace
                break
            out.append(rng.choice(allowed))
            assert len(out) < 2000


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def test_row_sampler_takes_a_bool_mask_like_an_id_list():
    import torch

    from ami.neuron.batch_ops import RowSampler
    from ami.neuron.scheduler import Row

    vocab = 50
    ids = [3, 7, 49]
    mask = torch.zeros(40, dtype=torch.bool)  # shorter than the logits: the rest is out
    mask[[3, 7]] = True
    scores = torch.randn(3, vocab)
    rows = [Row([1], 4, 1.0, 1.0, frozenset(), allowed=lambda out: ids),
            Row([1], 4, 1.0, 1.0, frozenset(), allowed=lambda out: mask),
            Row([1], 4, 1.0, 1.0, frozenset())]
    out = RowSampler(rows, 3, [([1], []), ([1], []), ([1], [])])._process(scores)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == ids
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [3, 7]
    assert torch.equal(out[2], scores[2])  # the plain row is untouched
    assert torch.equal(out[0, ids], scores[0, ids]) and torch.equal(out[1, [3, 7]], scores[1, [3, 7]])
