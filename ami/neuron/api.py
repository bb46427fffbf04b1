"""OpenAI chat-completions and completions request checking and response shapes (pure, no I/O).

Only what the engine honours is accepted; anything it would otherwise ignore or misread is a
400 naming the field, so a client never gets a silently different request served.

Log-probabilities follow vLLM's OpenAI server (vllm-project/vllm, commit 00463e62):
- chat: ``logprobs`` (bool) and ``top_logprobs`` (count; more than 0 needs ``logprobs: true``:
  ``check_logprobs`` in ``vllm/entrypoints/openai/protocol.py``); each generated token becomes
  ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}`` under
  ``choices[].logprobs.content`` (``_create_chat_logprobs`` / ``_get_top_logprobs`` in
  ``serving_chat.py``: ``bytes`` is the token's UTF-8 with errors replaced, log-probabilities
  floored at -9999.0);
- completions: ``logprobs`` (count) gives ``choices[].logprobs = {"text_offset", "token_logprobs",
  "tokens", "top_logprobs"}``; each ``top_logprobs`` entry is a dict of the token itself and up to
  ``logprobs`` most likely tokens (text -> log-probability), and with ``echo`` the prompt's
  tokens come first, the very first one with ``null`` (``_create_completion_logprobs`` and
  ``request_output_to_completion_response`` in ``serving_completion.py``).
The most alternatives taken is 20, vLLM's default ``--max-logprobs``.
"""
from __future__ import annotations

import json
import re
import math
import secrets
import time
from dataclasses import dataclass

ROLES = ("system", "developer", "user", "assistant", "tool")
# Deepest JSON nesting taken anywhere in messages or tools: a tool's parameter schema nests a
# few levels per object property; 64 leaves room for ~30 and stays far below Python's recursion
# limit (1000), which the chat template's recursive macros would otherwise hit.
MAX_DEPTH = 64
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs (ModelConfig.max_logprobs)
LOGPROB_FLOOR = -9999.0  # what vLLM writes instead of -inf (JSON has no infinity)
COMPLETION_MAX_TOKENS = 16  # OpenAI's and vLLM's default max_tokens for /v1/completions


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None, code: str | int | None = None,
                 status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.kind = param, code, status, kind


def show(value, limit: int = 80) -> str:
    """A value's repr for an error message, cut so a refusal never echoes a huge input back."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _flag(obj: dict, key: str, where: str) -> bool:
    """A JSON boolean or absent/null (false). The string "false" is not false: refuse it."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{where} must be true or false (a JSON boolean), got {show(value)}", where)
    return value


def _id(obj: dict, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where} must be a string, got {show(value)}", where)
    return value


def error_body(message: str, param: str | None = None, code: str | None = None,
               kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


MAX_N = 128  # sequences per request; the queue (--max-queue) bounds what can run, with a 400
MAX_STOPS = 64  # stop strings per request (vLLM sets no limit; OpenAI documents 4)
MAX_STOP_CHARS = 1000  # characters per stop string: held back from a stream, checked every token
LOGIT_BIAS_LIMIT = 100.0  # OpenAI: "values from -100 to 100"; vLLM clamps to it


@dataclass(frozen=True)
class Sampling:
    """The sampling fields both endpoints take, read as vLLM's OpenAI server reads them into its
    ``SamplingParams`` (ranges from ``SamplingParams._verify_args``, vllm/sampling_params.py)."""

    n: int = 1
    top_k: int = 0  # 0: off (vLLM: 0 or -1)
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple = ()  # (token id, bias) pairs, bias clamped to [-100, 100]
    stop: tuple = ()  # stop strings, matched on the generated text
    include_stop_str_in_output: bool = False


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict]  # normalised for the chat template
    tools: list[dict] | None
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    ignore_eos: bool
    logprobs: bool = False
    top_logprobs: int = 0
    sampling: Sampling = Sampling()
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (vLLM): usage in every chunk
    tool_choice: object = "auto"  # "auto", "required", or the name of the function to call
    response_format: tuple | None = None  # ("json_object",) or ("json_schema", schema); None: text


@dataclass(frozen=True)
class CompletionRequest:
    prompts: list  # each a string or a list of token ids, as sent
    echo: bool
    logprobs: int | None  # alternatives per token; None: no log-probabilities
    stream: bool
    include_usage: bool
    max_tokens: int
    temperature: float
    top_p: float
    ignore_eos: bool
    sampling: Sampling = Sampling()
    continuous_usage: bool = False
    response_format: tuple | None = None  # as ChatRequest's (vLLM takes it on completions too)


def depth(value, stop: int = MAX_DEPTH + 1) -> int:
    """Nesting depth of a JSON value (a scalar is 1), counted without recursion; stops at ``stop``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest >= stop:
            return deepest
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def _number(body: dict, key: str, default: float, lo: float, hi: float, lo_open=False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value > hi or value < lo or (lo_open and value == lo):
        bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise RequestError(f"{key} must be a number in {bound}, got {show(value)}", key)
    return float(value)


def _text(content, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}: only text content parts are supported, got {show(part)}", where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}: content must be a string or a list of text parts", where)


def _messages(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages must be a non-empty list", "messages")
    out: list[dict] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(f"{where}: role must be one of {', '.join(ROLES)}", where)
        role = m["role"]
        msg: dict = {"role": role, "content": _text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise RequestError(f"{where}.tool_calls must be a list", where)
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise RequestError(f"{where}.tool_calls[{j}]: needs function.name", where)
                call_id = _id(c, "id", f"{where}.tool_calls[{j}].id")
                args = fn.get("arguments") or "{}"
                args_at = f"{where}.tool_calls[{j}].function.arguments"
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except json.JSONDecodeError:
                    raise RequestError(f"{where}.tool_calls[{j}]: arguments are not JSON", where) from None
                except RecursionError:
                    raise RequestError(f"{args_at} is nested too deeply", args_at) from None
                if not isinstance(args, dict):
                    raise RequestError(f"{where}.tool_calls[{j}]: arguments must be a JSON object", where)
                if depth(args) > MAX_DEPTH:
                    raise RequestError(f"{args_at} is nested deeper than {MAX_DEPTH} levels", args_at)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": fn["name"], "arguments": args}})
                if call_id:
                    call_names[call_id] = fn["name"]
            msg["tool_calls"] = calls
        if role == "tool":
            # The template writes results under the function's name; OpenAI sends only the id.
            call_id = _id(m, "tool_call_id", f"{where}.tool_call_id")
            msg["name"] = _id(m, "name", f"{where}.name") or call_names.get(call_id, "tool")
            msg["tool_call_id"] = call_id
        _check_turn(out[-1] if out else None, msg, where)
        out.append(msg)
    return out


def _check_turn(prev: dict | None, msg: dict, where: str) -> None:
    """The order of turns. OpenAI refuses a tool result that follows no call ("Invalid parameter:
    messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
    param "messages.[3].role": its 400 quoted in github.com/smarter-sh/smarter issue 264 and
    miurla/morphic issue 136) and a call not followed by its results ("An assistant message with
    'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", quoted in
    microsoft/promptflow PR 3130). Two assistant turns in a row (e.g. a conversation that opens
    with two) are refused as well: Gemma's turns alternate between user and model (Google's
    Gemma 2 template raises "Conversation roles must alternate user/assistant/user/assistant/...",
    as copied in oxide-lab/Oxide-Lab src-tauri/src/core/templates/gemma2.rs), and the template
    would write two model turns back to back, a prompt the model was never trained on."""
    role = msg["role"]
    prev_role = prev["role"] if prev else None
    prev_calls = bool(prev and prev.get("tool_calls"))
    if role == "tool" and not (prev_role == "tool" or prev_calls):
        raise RequestError(f"{where}: a message with role 'tool' must answer a preceding assistant "
                           "message with tool_calls", f"{where}.role")
    if prev_calls and role != "tool":
        raise RequestError(f"{where}: the assistant message with tool_calls before it must be "
                           "followed by tool messages answering each call", f"{where}.role")
    if role == "assistant" and prev_role == "assistant":
        raise RequestError(f"{where}: two assistant turns in a row; the turns must alternate "
                           "(a user or tool message between them)", f"{where}.role")


# OpenAI's rule for a function's name (API reference, FunctionObject.name: "Must be a-z, A-Z, 0-9,
# or contain underscores and dashes, with a maximum length of 64"; the API's 400 quotes the pattern
# "does not match ^[a-zA-Z0-9_-]{1,64}$"). Gemma's template writes the name into the prompt
# between control tokens, and the tool-call parser reads it back up to '{': a name with spaces,
# markup or control-token text would be misread either way.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _tools(body: dict) -> tuple[list[dict] | None, object]:
    """(the tools to declare, or None; the tool choice: "auto", "required" or a function's name).
    The rules are vLLM's protocol checks (ChatCompletionRequest.check_tool_usage): a tool_choice
    needs tools ("When using `tool_choice`, `tools` must be set."), a named function must be one of
    them."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is not None and (not isinstance(tools, list) or not tools):
        raise RequestError(f"tools must be a non-empty list of functions, got {show(tools)}", "tools")
    if choice is not None and tools is None:
        raise RequestError("When using `tool_choice`, `tools` must be set.", "tool_choice")
    named = None
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        named = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(named, str):
            raise RequestError("tool_choice as an object must be {'type': 'function', 'function': "
                               f"{{'name': ...}}}}, got {show(choice)}", "tool_choice")
    elif choice not in (None, "auto", "none", "required"):
        raise RequestError(f"tool_choice must be 'auto', 'none', 'required' or a named function, got "
                           f"{show(choice)}", "tool_choice")
    if tools is None or choice == "none":
        return None, "auto"
    names: dict[str, int] = {}
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                               "tools")
        if not TOOL_NAME.fullmatch(fn["name"]):
            raise RequestError(f"tools[{i}].function.name {show(fn['name'])} must be 1 to 64 of a-z, A-Z, 0-9, "
                               "'_' and '-' (OpenAI's rule for function names)", f"tools[{i}].function.name")
        if fn["name"] in names:
            raise RequestError(f"tools[{i}].function.name {show(fn['name'])} is also tools[{names[fn['name']]}]'s; "
                               "a call names its function, so each name must be unique", f"tools[{i}].function.name")
        names[fn["name"]] = i
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise RequestError(f"tools[{i}].function.description must be a string, got "
                               f"{show(fn['description'])}", "tools")
        params = fn.get("parameters")
        if params is not None:
            at = f"tools[{i}].function.parameters"
            if not isinstance(params, dict):
                raise RequestError(f"{at} must be a JSON Schema object", at, "invalid_function_parameters")
            problem = schema_problem(params, at)
            if problem:
                raise RequestError(problem, at, "invalid_function_parameters")
            top = params.get("type", "object")
            if "object" not in (top if isinstance(top, list) else [top]):  # arguments are an object (_messages)
                raise RequestError(f"{at}.type must be 'object' (a function takes its arguments as "
                                   f"a JSON object), got {show(top)}", at, "invalid_function_parameters")
    if named is not None and named not in names:
        raise RequestError(f"tool_choice names {show(named)}, which is not among the tools "
                           f"({', '.join(names)})", "tool_choice")
    return tools, named if named is not None else (choice or "auto")


# The JSON Schema keywords whose value has a fixed shape (JSON Schema draft 2020-12 Validation
# and Core vocabularies: "type" is a string or an array of unique strings among the seven
# primitive names; "properties", "patternProperties", "$defs" are objects of schemas; "items",
# "additionalProperties", "not" ... are schemas; "allOf"/"anyOf"/"oneOf" non-empty arrays of
# schemas; "required" an array of strings; "enum" an array). OpenAI checks tool parameters the same
# way: its 400 reads "Invalid schema for function 'f': [] is not of type 'object', 'boolean'",
# param "tools[2].function.parameters", code "invalid_function_parameters" (quoted in
# github.com/FoundationAgents/OpenManus issue 1162). Checked here, the template never renders
# a declaration the model would misread (``{"type": 5}`` was written out as it came).
SCHEMA_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = ("items", "additionalProperties", "additionalItems", "not", "contains", "if", "then",
               "else", "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_TEXT = ("title", "description", "$ref", "$id", "$schema", "format", "pattern")


def schema_problem(schema, at: str) -> str | None:
    """The first keyword of a JSON Schema whose value has the wrong shape, named by its path
    (None: every keyword this walk knows has a valid shape). Iterative; the depth and size of
    ``schema`` are already bounded by the intake's budget (intake.check_size)."""
    stack = [(schema, at)]
    while stack:
        s, where = stack.pop()
        if isinstance(s, bool):  # true / false are schemas too
            continue
        if not isinstance(s, dict):
            return f"{where} must be a JSON Schema (an object or a boolean), got {show(s)}"
        t = s.get("type")
        if t is not None:
            names = t if isinstance(t, list) else [t]
            if not names or any(n not in SCHEMA_TYPES for n in names) or len(set(map(repr, names))) != len(names):
                return (f"{where}.type must be one of {', '.join(SCHEMA_TYPES)} or a list of them, "
                        f"got {show(t)}")
        for k in _SCHEMA_MAPS:
            if k in s:
                if not isinstance(s[k], dict):
                    return f"{where}.{k} must be an object mapping names to JSON Schemas, got {show(s[k])}"
                stack.extend((v, f"{where}.{k}.{name}") for name, v in s[k].items())
        for k in _SCHEMA_ONE:
            if k in s:
                if k == "items" and isinstance(s[k], list):  # draft 4-7 tuple form
                    stack.extend((v, f"{where}.items[{j}]") for j, v in enumerate(s[k]))
                else:
                    stack.append((s[k], f"{where}.{k}"))
        for k in _SCHEMA_LISTS:
            if k in s:
                if not isinstance(s[k], list) or not s[k]:
                    return f"{where}.{k} must be a non-empty list of JSON Schemas, got {show(s[k])}"
                stack.extend((v, f"{where}.{k}[{j}]") for j, v in enumerate(s[k]))
        req = s.get("required")
        if req is not None and not (isinstance(req, list) and all(isinstance(x, str) for x in req)):
            return f"{where}.required must be a list of property names, got {show(req)}"
        if "enum" in s and not isinstance(s["enum"], list):
            return f"{where}.enum must be a list, got {show(s['enum'])}"
        for k in _SCHEMA_TEXT:
            if s.get(k) is not None and not isinstance(s[k], str):
                return f"{where}.{k} must be a string, got {show(s[k])}"
    return None


def _common(body, served_model: str, refused: tuple) -> None:
    """Checks both endpoints make: the model, n, stop, seed, penalties and refused fields."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    if body.get("model") != served_model:
        # vLLM's answer, shape and words (OpenAIServing._check_model: "The model `x` does not
        # exist.", err_type "NotFoundError", status 404 as the code), plus what this server serves.
        raise RequestError(f"The model `{show(body.get('model'))}` does not exist. This server serves "
                           f"{served_model!r}.", "model", 404, status=404, kind="NotFoundError")
    for key, why in refused:
        if body.get(key) not in (None, False, 0, {}):
            raise RequestError(f"{key} is not supported: {why}", key)


def _int(body: dict, key: str, lo: int, hi: int, default):
    value = body.get(key)
    if value is None:
        return default
    if type(value) is not int or not lo <= value <= hi:  # bool is an int subclass: not a count
        raise RequestError(f"{key} must be an integer in [{lo}, {hi}], got {show(value)}", key)
    return value


def _sampling(body: dict) -> Sampling:
    """n, top_k, seed, penalties, logit_bias and stop, as vLLM takes them."""
    top_k = _int(body, "top_k", -1, 2**31 - 1, 0)
    stop = body.get("stop")
    if stop is None:
        stops: tuple = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(x, str) for x in stop):
        stops = tuple(stop)
    else:
        raise RequestError(f"stop must be a string or a list of strings, got {show(stop)}", "stop")
    if len(stops) > MAX_STOPS or any(not x or len(x) > MAX_STOP_CHARS for x in stops):
        raise RequestError(f"stop takes at most {MAX_STOPS} strings, each 1 to {MAX_STOP_CHARS} characters",
                           "stop")
    rep = _number(body, "repetition_penalty", 1.0, 0.0, 1e6, lo_open=True)
    return Sampling(
        n=_int(body, "n", 1, MAX_N, 1),
        top_k=max(top_k, 0),
        # vLLM's protocol bounds the seed to a signed 64-bit integer (_LONG_INFO)
        seed=_int(body, "seed", -2**63, 2**63 - 1, None),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=rep,
        logit_bias=_logit_bias(body.get("logit_bias")),
        stop=tuple(dict.fromkeys(stops)),
        include_stop_str_in_output=_flag(body, "include_stop_str_in_output", "include_stop_str_in_output"),
    )


def _logit_bias(raw) -> tuple:
    """OpenAI's map of token ids (as JSON object keys, strings) to a bias; the vocabulary bound is
    checked where the tokenizer is known (intake)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise RequestError(f"logit_bias must be an object mapping token ids to numbers, got {show(raw)}",
                           "logit_bias")
    out = []
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 10):
            raise RequestError(f"logit_bias key {show(key)} is not a token id", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RequestError(f"logit_bias[{key}] must be a number, got {show(value)}", "logit_bias")
        out.append((int(key), max(-LOGIT_BIAS_LIMIT, min(LOGIT_BIAS_LIMIT, float(value)))))
    return tuple(out)


def _count(body: dict, key: str, most: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= most:
        raise RequestError(f"{key} must be an integer in [0, {most}], got {show(value)}", key)
    return value


def _max_tokens(body: dict, default: int | None) -> int | None:
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        return default
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {show(max_tokens)}", "max_tokens")
    return max_tokens


def _stream_options(body: dict) -> dict:
    options = body.get("stream_options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    if body.get("stream") is not True:
        # vLLM's protocol check_stream_options: "Stream options can only be defined when `stream=True`."
        raise RequestError("Stream options can only be defined when `stream=True`.", "stream_options")
    return options


def parse_chat_request(body, served_model: str) -> ChatRequest:
    _common(body, served_model, ())
    fmt = _response_format(body.get("response_format"))
    logprobs = _flag(body, "logprobs", "logprobs")
    top = _count(body, "top_logprobs", MAX_LOGPROBS) or 0
    if top and not logprobs:
        raise RequestError("when using top_logprobs, logprobs must be set to true", "top_logprobs")
    options = _stream_options(body)
    tools, choice = _tools(body)
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=tools,
        stream=_flag(body, "stream", "stream"),
        include_usage=_flag(options, "include_usage", "stream_options.include_usage"),
        max_tokens=_max_tokens(body, None),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        ignore_eos=_flag(body, "ignore_eos", "ignore_eos"),
        logprobs=logprobs,
        top_logprobs=top,
        sampling=_sampling(body),
        continuous_usage=_flag(options, "continuous_usage_stats", "stream_options.continuous_usage_stats"),
        tool_choice=choice,
        response_format=fmt,
    )


def _response_format(raw):
    """None (free text), ("json_object",) or ("json_schema", schema): vLLM's ``ResponseFormat``
    (type "text", "json_object" or "json_schema"; ``json_schema`` holds ``name`` (a string),
    ``description``, ``schema`` and ``strict``; "When response_format type is 'json_schema', the
    'json_schema' field must be provided.": vllm/entrypoints/generate/base/protocol.py and
    ChatCompletionRequest.validate_response_format). The schema is compiled in the intake
    (ami/neuron/structured.py). ``structural_tag`` is vLLM's own and not taken here."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ("json_object",)
    if kind != "json_schema":
        raise RequestError("response_format must be {'type': 'text'}, {'type': 'json_object'} or "
                           f"{{'type': 'json_schema', 'json_schema': {{...}}}}, got {show(raw)}",
                           "response_format")
    spec = raw.get("json_schema")
    if not isinstance(spec, dict):
        raise RequestError("When response_format type is 'json_schema', the 'json_schema' field must "
                           "be provided.", "response_format")
    at = "response_format.json_schema"
    if not isinstance(spec.get("name"), str):
        raise RequestError(f"{at}.name must be a string, got {show(spec.get('name'))}", f"{at}.name")
    for key, kinds in (("description", str), ("strict", bool)):
        if spec.get(key) is not None and not isinstance(spec[key], kinds):
            raise RequestError(f"{at}.{key} must be a {kinds.__name__}, got {show(spec[key])}", f"{at}.{key}")
    schema = spec.get("schema")
    if schema is None:  # vLLM: StructuredOutputsParams with no constraint is refused
        raise RequestError(f"{at}.schema is required: the JSON Schema the answer must follow",
                           f"{at}.schema")
    if not isinstance(schema, dict):
        raise RequestError(f"{at}.schema must be a JSON Schema (an object), got {show(schema)}",
                           f"{at}.schema", "invalid_schema")
    if depth(schema) > MAX_DEPTH:
        raise RequestError(f"{at}.schema is nested deeper than {MAX_DEPTH} levels", f"{at}.schema",
                           "invalid_schema")
    problem = schema_problem(schema, f"{at}.schema")
    if problem:
        raise RequestError(problem, f"{at}.schema", "invalid_schema")
    return ("json_schema", schema)


def _prompts(raw) -> list:
    """OpenAI's four prompt forms (a string, a list of strings, a list of token ids, a list of
    lists of token ids) as a list of prompts, each a string or a list of ints."""
    def tokens(value) -> bool:
        return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)

    if isinstance(raw, str):
        prompts = [raw]
    elif tokens(raw):
        prompts = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(p, str) or tokens(p) for p in raw):
        prompts = list(raw)
    else:
        raise RequestError("prompt must be a string, a list of strings, a non-empty list of token "
                           "ids (integers) or a list of such lists", "prompt")
    if any(p == "" for p in prompts):
        raise RequestError("prompt must not be empty", "prompt")
    return prompts


def parse_completion_request(body, served_model: str) -> CompletionRequest:
    _common(body, served_model, (("suffix", "the model has no fill-in-the-middle format here"),
                                 ("prompt_logprobs", "use echo with logprobs")))
    if body.get("best_of") is not None and body.get("best_of") != 1:
        raise RequestError("best_of must be 1", "best_of")
    options = _stream_options(body)
    return CompletionRequest(
        prompts=_prompts(body.get("prompt")),
        echo=_flag(body, "echo", "echo"),
        logprobs=_count(body, "logprobs", MAX_LOGPROBS),
        stream=_flag(body, "stream", "stream"),
        include_usage=_flag(options, "include_usage", "stream_options.include_usage"),
        max_tokens=_max_tokens(body, COMPLETION_MAX_TOKENS),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        ignore_eos=_flag(body, "ignore_eos", "ignore_eos"),
        sampling=_sampling(body),
        continuous_usage=_flag(options, "continuous_usage_stats", "stream_options.continuous_usage_stats"),
        response_format=_response_format(body.get("response_format")),
    )


class Completion:
    """Ids, timestamps and chunk shapes of one chat completion."""

    def __init__(self, model: str) -> None:
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def chunk(self, delta: dict, finish_reason: str | None = None, usage_field: bool = False,
              logprobs: list[dict] | None = None, index: int = 0, stop_reason: str | None = None) -> dict:
        out = self._head("chat.completion.chunk")
        choice = {"index": index, "delta": delta, "logprobs": None if logprobs is None else {"content": logprobs},
                  "finish_reason": finish_reason}
        if finish_reason is not None:
            choice["stop_reason"] = stop_reason  # vLLM's: the stop string that ended it, else null
        out["choices"] = [choice]
        if usage_field:
            out["usage"] = None
        return out

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        out = self._head("chat.completion.chunk")
        out["choices"] = []
        out["usage"] = usage(prompt_tokens, completion_tokens)
        return out

    @staticmethod
    def choice(index: int, content: str, tool_calls: list[dict], finish_reason: str, reasoning: str = "",
               logprobs: list[dict] | None = None, stop_reason: str | None = None) -> dict:
        message: dict = {"role": "assistant", "content": content or (None if tool_calls else "")}
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {"index": index, "message": message,
                "logprobs": None if logprobs is None else {"content": logprobs},
                "finish_reason": finish_reason, "stop_reason": stop_reason}

    def full_choices(self, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
        """The answer; usage counts the prompt once and every choice's tokens (as vLLM does)."""
        out = self._head("chat.completion")
        out["choices"] = choices
        out["usage"] = usage(prompt_tokens, completion_tokens)
        return out

    def full(self, content: str, tool_calls: list[dict], finish_reason: str,
             prompt_tokens: int, completion_tokens: int, reasoning: str = "",
             logprobs: list[dict] | None = None) -> dict:
        return self.full_choices([self.choice(0, content, tool_calls, finish_reason, reasoning, logprobs)],
                                 prompt_tokens, completion_tokens)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def tool_call_json(call, with_index: bool) -> dict:
    out = {"id": call.id, "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}}
    if with_index:
        out = {"index": call.index, **out}
    return out


class TextCompletion:
    """Ids, timestamps and shapes of one /v1/completions answer (``object: text_completion``)."""

    def __init__(self, model: str) -> None:
        self.id = "cmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model

    def _head(self) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}

    @staticmethod
    def choice(index: int, text: str, logprobs: dict | None, finish_reason: str | None) -> dict:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

    def full(self, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
        return {**self._head(), "choices": choices, "usage": usage(prompt_tokens, completion_tokens)}

    def chunk(self, choice: dict, usage_field: bool = False) -> dict:
        out = {**self._head(), "choices": [choice]}
        if usage_field:
            out["usage"] = None
        return out

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        return {**self._head(), "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def _floor(logprob: float) -> float:
    return max(logprob, LOGPROB_FLOOR)


def chat_logprob(entry, text) -> dict:
    """One generated token for ``choices[].logprobs.content``; ``text(id)`` spells a token."""
    def one(token: int, logprob: float) -> dict:
        s = text(token)
        return {"token": s, "logprob": _floor(logprob), "bytes": list(s.encode("utf-8", errors="replace"))}

    return {**one(entry.token, entry.logprob), "top_logprobs": [one(t, lp) for t, lp in entry.top]}


def completion_logprobs(entries: list, text, offset: int = 0) -> dict:
    """``choices[].logprobs`` of a completion over ``entries`` (per token: ``scheduler.Sampled``,
    or ``(token_id, None)`` for the first prompt token, which nothing predicts); ``offset`` is
    the text already sent before these tokens (streaming)."""
    out = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for entry in entries:
        token, logprob = entry[0], entry[1]
        s = text(token)
        out["text_offset"].append(offset)
        out["tokens"].append(s)
        offset += len(s)
        if logprob is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        out["token_logprobs"].append(_floor(logprob))
        top = {s: _floor(logprob)}  # the token itself first, then the most likely ones
        for t, lp in entry.top:
            top.setdefault(text(t), _floor(lp))
        out["top_logprobs"].append(top)
    return out
