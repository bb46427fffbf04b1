"""Structured output: JSON answers (``response_format``) and forced tool calls (``tool_choice``
"required" or a named function), as a logits mask on the rows that ask, through llguidance.

What vLLM does, and where this follows it (vllm-project/vllm):
- ``response_format`` ``{"type": "json_object"}`` is the JSON Schema ``{"type": "object"}`` and
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`` is ``schema``
  (``structured_outputs_from_response_format``, vllm/entrypoints/generate/base/protocol.py); both
  endpoints take it (``CompletionRequest.response_format``: "Similar to chat completion ...",
  vllm/entrypoints/openai/completion/protocol.py).
- llguidance compiles it with ``LLMatcher.grammar_from_json_schema(schema,
  defaults={"whitespace_flexible": True})`` (``serialize_guidance_grammar``,
  vllm/v1/structured_output/backend_guidance.py; whitespace is flexible unless the server sets
  ``disable_any_whitespace``), over a tokenizer made once per engine by
  ``llguidance.hf.from_tokenizer`` (``GuidanceBackend.__post_init__``).
- A forced tool choice is a JSON Schema too (``get_json_schema_from_tools``,
  vllm/tool_parsers/utils.py): a named function's ``parameters``; "required" an array,
  ``minItems`` 1, of ``{"name": <enum of one tool's name>, "parameters": <its parameters>}``
  objects, one ``anyOf`` branch per tool (a tool without parameters takes
  ``{"type": "object", "properties": {}}``), every tool's ``$defs`` lifted to the top. The output
  becomes the answer's tool calls (``DelegatingParser._extract_tool_calls``,
  vllm/parser/abstract_parser.py): named, one call whose ``arguments`` is the text as generated;
  required, one call per array item, ``arguments = json.dumps(parameters, ensure_ascii=False)``;
  ``message.content`` is ``""`` (``content or ""``, ``chat_completion_full_generator``).
  ``finish_reason`` is "tool_calls" for "required" and "stop" for a named function ("In OpenAI's
  API, when a tool is called, the finish_reason is: 'tool_calls' for 'auto' or 'required' tool
  calls, and 'stop' for named tool calls", vllm/entrypoints/openai/chat_completion/serving.py).
  A forced tool choice wins over ``response_format`` ("structured outputs are ignored because
  tool_choice forces tool call", ``DelegatingParser._apply_structural_tag``).
- Which backend: vLLM's default ``structured_outputs_config.backend`` is "auto", which tries
  xgrammar first and falls back to "guidance" (llguidance) when xgrammar cannot take the request
  (``SamplingParams._validate_structured_outputs``, vllm/sampling_params.py; the default in
  vllm/config/structured_outputs.py). llguidance is the one used here because it is one abi3
  wheel with no dependencies (llguidance 1.9.1's METADATA has no Requires-Dist), while xgrammar
  brings torch, transformers and pydantic in its requirements and ships a wheel per Python
  version; llguidance takes every JSON Schema feature xgrammar takes and more (vLLM falls back to
  it for them), so a schema valid here is one vLLM serves.
- Extra object properties: xgrammar, which vLLM's default picks for most schemas, compiles in
  its ``strict_mode`` (default true: "the generated grammar will not allow properties and items
  that is not specified in the schema", xgrammar's JSONSchemaToEBNF), while llguidance follows
  JSON Schema and allows them. vLLM's guidance backend has ``disable_additional_properties``
  "to better align its behaviour with outlines and xgrammar": ``additionalProperties: false``
  on every object schema with ``properties`` (or ``patternProperties``) that does not say
  otherwise (``process_for_additional_properties``). That is applied here, so an answer has the
  keys vLLM's default would give it, and a required tool call has no keys but name and
  parameters.

The mask: each sequence gets its own ``Constraint`` (a copy of the request's compiled matcher);
``Constraint(output ids so far)`` feeds the new ids to the matcher and returns a ``torch.bool``
mask of the vocabulary (llguidance's packed bitmask unpacked in two tensor operations), which
``batch_ops.RowSampler`` applies to that row only. The tokenizer's end tokens are the chat's stop
ids (end of turn, end of text): the matcher allows them exactly when the JSON is complete, so the
answer ends there. ``python -m ami.neuron.mask_bench`` measures the cost per step at Gemma's
262,144-token vocabulary.
"""
from __future__ import annotations

import json
import secrets
import threading
from dataclasses import dataclass

from . import api

# Cached llguidance tokenizers: one per engine tokenizer (building one walks the whole
# vocabulary, about a second for Gemma's; llguidance.hf.from_tokenizer says "should be cached").
_TOKENIZERS: dict[int, tuple[object, object]] = {}
_LOCK = threading.Lock()
JSON_OBJECT = {"type": "object"}


def warm(chat) -> None:
    """Build ``chat``'s llguidance tokenizer before the server listens, so no request waits for
    it (seconds for Gemma's vocabulary on a small host). Without llguidance the server still
    serves; a structured request is then answered with the reason."""
    import logging

    log = logging.getLogger(__name__)
    try:
        llg_tokenizer(chat)
    except ImportError as exc:
        log.warning("structured output (response_format, tool_choice required/named) is off: %s", exc)
    except Exception:  # a tokenizer llguidance cannot read: say so, serve the rest
        log.exception("structured output is off: llguidance cannot read this tokenizer")


def llg_tokenizer(chat):
    """The llguidance tokenizer of ``chat`` (a ``chat.ChatFormat``), built once: the HF fast
    tokenizer's own vocabulary, its length as the vocabulary size (vLLM passes
    ``max(vocab_size, len(tokenizer))``), and the chat's stop ids as the end tokens."""
    import llguidance.hf

    tok = chat.tokenizer
    with _LOCK:
        hit = _TOKENIZERS.get(id(tok))
        if hit is not None and hit[0] is tok:
            return hit[1]
        ll = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok), eos_token=sorted(chat.stop_ids))
        _TOKENIZERS[id(tok)] = (tok, ll)
        return ll


@dataclass(frozen=True)
class Spec:
    """What a request constrains: a JSON Schema, and where it came from (for the 400)."""

    schema: dict
    param: str  # the request field a bad schema is refused under
    tool_choice: object = None  # "required", a function's name, or None (response_format)


def spec_for(req) -> Spec | None:
    """A chat or completion request's constraint, if any: a forced tool choice first, else
    ``response_format``."""
    choice = getattr(req, "tool_choice", "auto")
    if choice != "auto" and req.tools:
        return Spec(tool_schema(choice, req.tools), "tools", choice)
    fmt = getattr(req, "response_format", None)
    if fmt is None:
        return None
    if fmt[0] == "json_object":
        return Spec(JSON_OBJECT, "response_format")
    return Spec(fmt[1], "response_format.json_schema.schema")


# The keywords whose values are schemas (maps of them, or one or a list), as vLLM's
# _walk_json_for_additional_properties visits them (vllm/v1/structured_output/backend_guidance.py).
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SUBS = ("additionalProperties", "unevaluatedProperties", "propertyNames", "contains", "additionalItems",
         "unevaluatedItems", "not", "if", "then", "else", "contentSchema", "items", "prefixItems",
         "allOf", "anyOf", "oneOf")


def closed(schema):
    """A copy of ``schema`` with ``additionalProperties: false`` wherever an object schema lists
    ``properties`` or ``patternProperties`` and says nothing of others (vLLM's
    ``process_for_additional_properties``). The depth is bounded by the intake."""
    if isinstance(schema, list):
        return [closed(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: closed(v) for k, v in out[key].items()}
    for key in _SUBS:
        if isinstance(out.get(key), (dict, list)):
            out[key] = closed(out[key])
    if "additionalProperties" not in out and (isinstance(out.get("properties"), dict)
                                              or isinstance(out.get("patternProperties"), dict)):
        out["additionalProperties"] = False
    return out


def _params(tool: dict) -> dict:
    return tool["function"].get("parameters") or {"type": "object", "properties": {}}


def tool_schema(choice, tools: list[dict]) -> dict:
    """vLLM's schema for a forced tool choice (see the module's docstring). A named function
    without parameters still answers a JSON object: its arguments are one."""
    if choice != "required":
        tool = next(t for t in tools if t["function"]["name"] == choice)
        return _params(tool)
    defs: dict = {}
    branches = []
    for tool in tools:
        params = dict(_params(tool))
        for name, sub in (params.pop("$defs", None) or {}).items():
            if name in defs and defs[name] != sub:
                raise api.RequestError(f"tools define $defs.{name} twice with different schemas; a "
                                       "forced tool choice needs one", "tools")
            defs[name] = sub
        branches.append({"properties": {"name": {"type": "string", "enum": [tool["function"]["name"]]},
                                        "parameters": params},
                         "required": ["name", "parameters"]})
    schema: dict = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": branches}}
    if defs:
        schema["$defs"] = defs
    return schema


class Compiled:
    """A request's compiled grammar: call it for each sequence's own ``Constraint``."""

    def __init__(self, matcher, vocab: int, stop_ids: frozenset) -> None:
        self._matcher, self._vocab, self._stop_ids = matcher, vocab, stop_ids

    def __call__(self) -> "Constraint":
        return Constraint(self._matcher.deep_copy(), self._vocab, self._stop_ids)


def compile_spec(spec: Spec, chat) -> Compiled:
    """Compile in the intake thread; a schema llguidance refuses is a 400 naming ``spec.param``."""
    try:
        import llguidance

        ll = llg_tokenizer(chat)
    except ImportError as exc:
        raise api.RequestError(f"structured output needs llguidance, which this server lacks ({exc})",
                               spec.param, "unsupported", status=501, kind="server_error") from None
    except ValueError as exc:  # e.g. "Only fast tokenizers are supported" (llguidance.hf)
        raise api.RequestError(f"structured output is off on this server: {api.show(str(exc), 200)}",
                               spec.param, "unsupported", status=501, kind="server_error") from None
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            closed(spec.schema), defaults={"whitespace_flexible": True})
        matcher = llguidance.LLMatcher(ll, grammar, log_level=0)
    except (ValueError, TypeError) as exc:
        raise api.RequestError(f"{spec.param} cannot be compiled: {api.show(str(exc), 300)}",
                               spec.param, "invalid_schema") from None
    if matcher.is_error():
        raise api.RequestError(f"{spec.param} is not a JSON Schema this server can enforce: "
                               f"{api.show(matcher.get_error(), 300)}", spec.param, "invalid_schema")
    return Compiled(matcher, ll.vocab_size, chat.stop_ids)


class Constraint:
    """One sequence's state: ``self(output ids so far)`` -> torch.bool mask of the vocabulary,
    True where the next token may be. Called once per step, from the engine thread."""

    def __init__(self, matcher, vocab: int, stop_ids: frozenset) -> None:
        import numpy as np

        self._m = matcher
        self._fed = 0
        self._words = np.zeros((vocab + 31) // 32, dtype=np.uint32)  # llguidance's bitmask
        self._vocab = vocab
        self._stop = sorted(stop_ids)

    def __call__(self, output) -> object:
        import numpy as np
        import torch

        m = self._m
        for token in output[self._fed:]:  # one new token per step; more only after a skipped step
            self._fed += 1
            if m.is_stopped():  # complete and a stop token taken: nothing after it matters
                break
            m.consume_token(token)  # a refused token puts the matcher in its error state
        # Drops the GIL; a matcher stopped or in error allows only the end tokens (llguidance).
        m.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        # Bit j of byte b is token 8b + j: llguidance writes 32-bit words, token 32w + j at bit j,
        # and they are little-endian (x86-64, aarch64). numpy unpacks 262,144 bits in ~13 us on
        # the 2-core dev host; torch 2.13's broadcast uint8 and-then-compare took ~24 ms there.
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")[:self._vocab]
        mask = torch.from_numpy(bits.view(np.bool_))
        if not bits.any():  # never sample from nothing: end the answer instead
            mask[self._stop] = True
        return mask


@dataclass(frozen=True)
class ArgumentsDelta:
    """More ``arguments`` text of the tool call at ``index`` (a named tool choice, streamed)."""

    index: int
    arguments: str


class ForcedCalls:
    """The constrained output of a forced tool choice -> tool-call events, fed as decoded text.

    Named: the first text opens the call (id, name and the text so far as ``arguments``) and
    the rest follows as ``ArgumentsDelta`` (vLLM's ``extract_named_tool_call_streaming`` streams
    the generated text as arguments the same way). Required: each array item becomes a call once
    its object is complete, ``arguments`` re-serialised as vLLM does; an item cut off by
    ``max_tokens`` is dropped, as vLLM drops an array that does not parse."""

    def __init__(self, choice, id_prefix: str = "call_") -> None:
        from .toolcalls import ToolCall

        self._tool_call = ToolCall
        self._named = None if choice == "required" else choice
        self._prefix = id_prefix
        self._calls = 0
        self._buf = ""  # required: the text of the array item being read
        self._depth = 0
        self._in_str = self._escaped = False
        # In OpenAI's API (vLLM's comment, serving.py): "stop" for a named tool choice
        self.finish_reason = "stop" if self._named else "tool_calls"

    @property
    def calls(self) -> int:
        return self._calls

    def _new_call(self, name: str, arguments: str):
        call = self._tool_call(self._calls, self._prefix + secrets.token_hex(12), name, arguments)
        self._calls += 1
        return call

    def feed(self, text: str) -> list:
        if not text:
            return []
        if self._named is not None:
            if self._calls == 0:
                return [self._new_call(self._named, text)]
            return [ArgumentsDelta(0, text)]
        events = []
        for ch in text:  # the grammar guarantees the shape: count braces outside strings
            if self._depth >= 2 or (self._depth == 1 and ch == "{"):
                self._buf += ch
            if self._in_str:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_str = False
            elif ch == '"':
                self._in_str = True
            elif ch in "[{":
                self._depth += 1
            elif ch in "]}":
                self._depth -= 1
                if self._depth == 1 and ch == "}":
                    item, self._buf = json.loads(self._buf), ""
                    events.append(self._new_call(item["name"], json.dumps(item["parameters"],
                                                                          ensure_ascii=False)))
        return events

    def finish(self) -> list:
        return []
