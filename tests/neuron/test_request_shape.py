"""The engine's last validation gaps: the order of turns, and a tool's
``parameters`` that is not a JSON Schema. Each is a 400 naming the field, never rendered.

The checks are pure (ami.neuron.api.parse_chat_request), so the whole kind of input runs here
without a server; tests/neuron/test_hostile.py runs a few of them over HTTP too.
"""
from __future__ import annotations

import json

import pytest

from ami.neuron.api import RequestError, parse_chat_request

from .test_hostile import openai_error, post, server  # noqa: F401 - server is a fixture

U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "hello"}
S = {"role": "system", "content": "be brief"}
CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "8"}


def _parse(messages=None, tools=None):
    body = {"model": "tiny", "messages": messages or [U]}
    if tools is not None:
        body["tools"] = tools
    return parse_chat_request(body, "tiny")


# (case, messages, the param the 400 names)
BAD_ORDER = [
    ("starts with two assistant turns", [A, A, U], "messages[1].role"),
    ("system then two assistant turns", [S, A, A, U], "messages[2].role"),
    ("two assistant turns mid-conversation", [U, A, A, U], "messages[2].role"),
    ("three assistant turns", [U, A, A, A], "messages[2].role"),
    ("ends with two assistant turns", [U, A, A], "messages[2].role"),
    ("a tool result first", [RESULT, U], "messages[0].role"),
    ("a tool result after a user turn", [U, RESULT], "messages[1].role"),
    ("a tool result after a plain assistant turn", [U, A, RESULT], "messages[2].role"),
    ("a tool result after system", [S, RESULT], "messages[1].role"),
    ("a call answered by a user turn", [U, CALL, U], "messages[2].role"),
    ("a call followed by an assistant turn", [U, CALL, A], "messages[2].role"),
]

GOOD_ORDER = [
    ("one user turn", [U]),
    ("system, user", [S, U]),
    ("alternating", [U, A, U, A, U]),
    ("an assistant greeting first", [A, U]),
    ("a call, its result, an answer", [U, CALL, RESULT, A]),
    ("a call, two results", [U, {**CALL, "tool_calls": CALL["tool_calls"] * 2}, RESULT, RESULT]),
    ("a call awaiting its result last", [U, CALL]),
    ("a result then a user turn", [U, CALL, RESULT, U]),
]


@pytest.mark.parametrize("case, messages, param", BAD_ORDER, ids=[c[0] for c in BAD_ORDER])
def test_a_conversation_out_of_order_is_a_400_naming_the_turn(case, messages, param):
    with pytest.raises(RequestError) as e:
        _parse(messages)
    assert e.value.status == 400 and e.value.param == param, (str(e.value), e.value.param)
    assert param.split(".")[0] in str(e.value)


@pytest.mark.parametrize("case, messages", GOOD_ORDER, ids=[c[0] for c in GOOD_ORDER])
def test_a_conversation_in_order_is_taken(case, messages):
    assert len(_parse(messages).messages) == len(messages)


def _tool(parameters) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


P = "tools[0].function.parameters"
# (case, parameters, a piece of the message naming where)
BAD_SCHEMA = [
    ("type 5", {"type": 5}, f"{P}.type"),
    ("type unknown word", {"type": "objekt"}, f"{P}.type"),
    ("type empty list", {"type": []}, f"{P}.type"),
    ("type list with a number", {"type": ["object", 5]}, f"{P}.type"),
    ("type list repeated", {"type": ["object", "object"]}, f"{P}.type"),
    ("type null value as string list", {"type": [None]}, f"{P}.type"),
    ("top-level type string", {"type": "string"}, f"{P}.type"),
    ("top-level type array", {"type": "array", "items": {"type": "string"}}, f"{P}.type"),
    ("properties a string", {"type": "object", "properties": "filters"}, f"{P}.properties"),
    ("properties a list", {"type": "object", "properties": ["a"]}, f"{P}.properties"),
    ("a property a number", {"type": "object", "properties": {"a": 5}}, f"{P}.properties.a"),
    ("a property a string", {"type": "object", "properties": {"a": "string"}}, f"{P}.properties.a"),
    ("a property's type 5", {"type": "object", "properties": {"a": {"type": 5}}}, f"{P}.properties.a.type"),
    ("nested properties a string", {"type": "object", "properties": {"a": {"type": "object", "properties": "x"}}},
     f"{P}.properties.a.properties"),
    ("items a number", {"type": "object", "properties": {"a": {"type": "array", "items": 5}}},
     f"{P}.properties.a.items"),
    ("items type 7", {"type": "object", "properties": {"a": {"type": "array", "items": {"type": 7}}}},
     f"{P}.properties.a.items.type"),
    ("required a string", {"type": "object", "required": "a"}, f"{P}.required"),
    ("required numbers", {"type": "object", "required": [1]}, f"{P}.required"),
    ("enum a string", {"type": "object", "properties": {"a": {"enum": "xy"}}}, f"{P}.properties.a.enum"),
    ("anyOf an object", {"type": "object", "properties": {"a": {"anyOf": {}}}}, f"{P}.properties.a.anyOf"),
    ("anyOf empty", {"type": "object", "properties": {"a": {"anyOf": []}}}, f"{P}.properties.a.anyOf"),
    ("oneOf with a number", {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, 3]}}},
     f"{P}.properties.a.oneOf[1]"),
    ("additionalProperties a string", {"type": "object", "additionalProperties": "no"},
     f"{P}.additionalProperties"),
    ("description a list", {"type": "object", "properties": {"a": {"description": ["x"]}}},
     f"{P}.properties.a.description"),
    ("$defs a list", {"type": "object", "$defs": []}, f"{P}.$defs"),
    ("$ref a number", {"type": "object", "properties": {"a": {"$ref": 1}}}, f"{P}.properties.a.$ref"),
    ("parameters a list", [{"type": "object"}], P),
    ("parameters a string", "object", P),
]

GOOD_SCHEMA = [
    ("empty", {}),
    ("object", {"type": "object"}),
    ("the agent trial's tool", {"type": "object", "properties": {"filters": {
        "type": "array", "items": {"type": "string"}, "description": "conditions"}}, "required": ["filters"]}),
    ("nullable list type", {"type": ["object", "null"], "properties": {"a": {"type": ["string", "null"]}}}),
    ("boolean subschemas", {"type": "object", "properties": {"a": True, "b": False}, "additionalProperties": False}),
    ("anyOf, enum, $defs, $ref", {"type": "object", "$defs": {"x": {"type": "integer"}}, "properties": {
        "a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/x"}]}, "b": {"enum": ["x", 1, None]}}}),
    ("tuple items (draft 7)", {"type": "object", "properties": {"p": {"type": "array", "items": [{"type": "number"}]}}}),
    ("unknown keywords kept", {"type": "object", "x-vendor": {"anything": 5}}),
]


@pytest.mark.parametrize("case, params, where", BAD_SCHEMA, ids=[c[0] for c in BAD_SCHEMA])
def test_parameters_that_are_not_a_json_schema_are_a_400_naming_the_field(case, params, where):
    with pytest.raises(RequestError) as e:
        _parse(tools=_tool(params))
    assert e.value.status == 400 and e.value.param == P, (str(e.value), e.value.param)
    assert e.value.code == "invalid_function_parameters"
    assert str(e.value).startswith(where), str(e.value)


@pytest.mark.parametrize("case, params", GOOD_SCHEMA, ids=[c[0] for c in GOOD_SCHEMA])
def test_a_json_schema_is_taken(case, params):
    assert _parse(tools=_tool(params)).tools[0]["function"]["parameters"] == params


@pytest.mark.parametrize("body, param", [
    ({"messages": [A, A, U]}, "messages[1].role"),
    ({"tools": _tool({"type": 5})}, P),
    ({"tools": _tool({"type": "object", "properties": "x"})}, P),
], ids=["two assistant turns first", "type 5", "properties a string"])
def test_over_http_the_engine_answers_an_openai_400(server, body, param):  # noqa: F811 - the fixture
    got, hdrs, payload = post(server.port, json.dumps({"model": "tiny", "messages": [U], "max_tokens": 2,
                                                       **body}).encode())
    assert got == 400, payload[:300]
    assert openai_error(got, hdrs, payload)["param"] == param


BAD_TOOL_NAMES = [("a space", "my tool"), ("control-token text", "f<end_of_turn>"), ("non-ASCII", "функция"),
                  ("65 characters", "f" * 65), ("empty", ""), ("a dot", "a.b"), ("a brace", "f{x}")]


@pytest.mark.parametrize("case, name", BAD_TOOL_NAMES, ids=[c[0] for c in BAD_TOOL_NAMES])
def test_a_tool_name_outside_openais_rule_is_a_400_naming_it(case, name):
    tools = [{"type": "function", "function": {"name": "ok"}}, {"type": "function", "function": {"name": name}}]
    with pytest.raises(RequestError) as e:
        _parse([{"role": "user", "content": "hi"}], tools=tools)
    assert e.value.status == 400 and e.value.param in ("tools[1].function.name", "tools")


def test_two_tools_with_one_name_are_a_400_naming_the_second():
    tools = [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]
    with pytest.raises(RequestError) as e:
        _parse([{"role": "user", "content": "hi"}], tools=tools)
    assert e.value.param == "tools[1].function.name" and "tools[0]" in str(e.value)


def test_names_inside_the_rule_are_taken():
    tools = [{"type": "function", "function": {"name": n}} for n in ("count_ids", "get-weather", "A1", "f" * 64)]
    assert len(_parse([{"role": "user", "content": "hi"}], tools=tools).tools) == 4
