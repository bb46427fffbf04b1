"""Request bytes -> checked request + prompt token ids, cheapest checks first.

The server runs ``prepare`` in its intake thread, never on the event loop, so the cost of a
hostile body lands on that thread and ``/health`` keeps answering. The order is what keeps the
cost small: the body size is capped (``IntakeLimits.max_body_bytes``, by aiohttp) before this
runs; then UTF-8, JSON (a nesting
too deep for the parser is a 400), the number of messages and tools, a budget of characters
and nesting depth over both, the field types (``api.parse_chat_request``), and only then the
chat template and the tokenizer, on a conversation already known to be small enough to fit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from . import api
from .generator import Generator, LimitError, SamplingParams


# The most bytes one character of a JSON string can take: a character outside the Basic
# Multilingual Plane written as two \\uXXXX escapes (RFC 8259 section 7), 12 bytes.
BYTES_PER_CHAR = 12
STRUCTURE_BYTES = 64  # keys and punctuation of one message or tool, beyond its strings
SLACK_BYTES = 64 * 1024  # the other fields (model, sampling, metadata, ...)
BODY_CAP_BYTES = 16 * 1024 * 1024  # never more than this, whatever the shapes


@dataclass(frozen=True)
class IntakeLimits:
    """Limits implied by the compiled prompt length: a request over one cannot fit anyway."""

    max_messages: int  # every message writes at least its turn (or call/result) marker token
    max_tools: int  # every tool writes at least its declaration marker token
    max_chars: int  # prompt tokens x the longest token's characters (see ChatFormat.max_token_chars)
    max_depth: int = api.MAX_DEPTH

    @classmethod
    def for_generator(cls, gen: Generator) -> "IntakeLimits":
        tokens = gen.limits.max_prompt_tokens
        return cls(tokens, tokens, tokens * gen.chat.max_token_chars)

    @property
    def max_body_bytes(self) -> int:
        """The largest body that could hold a request within these limits. Bigger bodies are
        refused by size before any of it is parsed: Python's JSON parser holds the GIL while it
        runs (0.8 s for 30,000 tools on a busy machine), which would stall the event loop."""
        return min(BODY_CAP_BYTES, BYTES_PER_CHAR * self.max_chars
                   + STRUCTURE_BYTES * (self.max_messages + self.max_tools) + SLACK_BYTES)


@dataclass(frozen=True)
class Prepared:
    request: api.ChatRequest
    prompt_ids: list[int]
    max_new: int
    # Structured output: a factory of one constraint per sequence (each keeps its own state):
    # constraint(output ids so far) -> what may come next (token ids, or a torch.bool mask of the
    # vocabulary: structured.Constraint)
    allowed: object = None


@dataclass(frozen=True)
class PreparedCompletion:
    request: api.CompletionRequest
    prompt_ids: list[list[int]]
    prompt_texts: list[str]  # what echo writes back: the text sent, or the ids decoded
    max_new: list[int]
    allowed: object = None  # as Prepared.allowed (response_format)


def load_json(raw: bytes):
    # RFC 8259 section 8.1: JSON exchanged between systems MUST be UTF-8; section 11: no
    # "charset" parameter is defined for application/json, so whatever one says is ignored.
    # (https://www.rfc-editor.org/rfc/rfc8259)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise api.RequestError(f"request body is not UTF-8 (byte {exc.start}); JSON must be "
                               "UTF-8 (RFC 8259)", None, "invalid_json") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise api.RequestError("request body is nested too deeply to parse; at most "
                               f"{api.MAX_DEPTH} levels are taken", None, "invalid_json") from None
    except json.JSONDecodeError as exc:
        raise api.RequestError(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}", None, "invalid_json") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit conversion limit
        raise api.RequestError(f"request body holds a value this server cannot read: "
                               f"{api.show(str(exc), 120)}", None, "invalid_json") from None


def check_size(body: dict, lim: IntakeLimits) -> None:
    """Counts, then one walk over messages and tools that stops as soon as a budget is spent:
    each string costs its length, every other value 1, so the walk is at most ``max_chars`` long."""
    for key, most in (("messages", lim.max_messages), ("tools", lim.max_tools)):
        value = body.get(key)
        if isinstance(value, list) and len(value) > most:
            raise api.RequestError(
                f"{key} has {len(value)} entries; this server takes at most {most} (its largest "
                f"prompt bucket is {lim.max_messages} tokens and each entry takes at least one)",
                key, f"too_many_{key}")
    used = 0
    for key in ("messages", "tools"):
        stack = [(body.get(key), 1)]
        while stack:
            value, level = stack.pop()
            if level > lim.max_depth:
                raise api.RequestError(f"{key} is nested deeper than {lim.max_depth} levels", key,
                                       "too_deep")
            if isinstance(value, str):
                used += len(value)
                if not value.isascii():
                    _check_text(value, key)
            elif isinstance(value, dict):
                used += 1 + sum(len(k) if isinstance(k, str) else 1 for k in value)
                stack.extend((x, level + 1) for x in value.values())
            elif isinstance(value, list):
                used += 1
                stack.extend((x, level + 1) for x in value)
            else:
                used += 1
            if used > lim.max_chars:
                raise api.RequestError(
                    f"messages and tools hold more than {lim.max_chars} characters, more than "
                    f"fits in this server's largest prompt bucket ({lim.max_messages} tokens)",
                    key, "prompt_too_long")


def _check_text(text: str, key: str) -> None:
    """JSON's \\u escapes can spell half a UTF-16 surrogate pair, which is no character: the
    tokenizer would refuse it deep inside, so say what it is here."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise api.RequestError(f"{key} holds a lone UTF-16 surrogate ({text[exc.start]!r}), which "
                               "is not a character", key, "invalid_text") from None


def check_logit_bias(sampling: api.Sampling, gen: Generator) -> None:
    """Token ids of logit_bias inside the vocabulary (vLLM refuses out-of-vocabulary ids:
    "token_id(s) ... in logit_bias contain out-of-vocab token ids")."""
    vocab = len(gen.chat.tokenizer)
    bad = [t for t, _ in sampling.logit_bias if t >= vocab]
    if bad:
        raise api.RequestError(f"logit_bias names token ids outside the vocabulary of {vocab}: "
                               f"{api.show(bad)}", "logit_bias")


def prepare(raw: bytes, gen: Generator, lim: IntakeLimits) -> Prepared:
    """Raises api.RequestError or generator.LimitError for a request that cannot be served."""
    body = load_json(raw)
    if not isinstance(body, dict):
        raise api.RequestError("request body must be a JSON object")
    check_size(body, lim)
    req = api.parse_chat_request(body, gen.model_id)
    check_logit_bias(req.sampling, gen)
    try:
        prompt_ids = gen.chat.render(req.messages, req.tools)
    except Exception as exc:  # noqa: BLE001 - the template refused the conversation (e.g. role order)
        raise api.RequestError("cannot render the conversation with the chat template: "
                               f"{api.show(str(exc), 300)}", "messages") from None
    max_new = gen.limits.resolve_max_tokens(len(prompt_ids), req.max_tokens)
    return Prepared(req, prompt_ids, max_new, constraint(req, gen))


def constraint(req, gen: Generator):
    """The request's structured-output constraint factory (response_format, or tool_choice
    "required" or a named function), compiled here in the intake thread; None when free."""
    from . import structured

    spec = structured.spec_for(req)
    return None if spec is None else structured.compile_spec(spec, gen.chat)



def _check_prompt_size(body: dict, lim: IntakeLimits) -> None:
    """Before tokenizing: at most ``max_messages`` prompts (one token each at least), each string
    within the character budget and each id list within the largest prompt bucket."""
    prompt = body.get("prompt")
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], (str, list)):
        prompt = [prompt]
    if len(prompt) > lim.max_messages:
        raise api.RequestError(f"prompt has {len(prompt)} entries; this server takes at most "
                               f"{lim.max_messages} in one request", "prompt", "too_many_prompts")
    for p in prompt:
        if isinstance(p, str):
            if len(p) > lim.max_chars:
                raise api.RequestError(f"a prompt holds {len(p)} characters, more than fits in this "
                                       f"server's largest prompt bucket ({lim.max_messages} tokens)",
                                       "prompt", "prompt_too_long")
            if not p.isascii():
                _check_text(p, "prompt")
        elif isinstance(p, list) and len(p) > lim.max_messages:
            raise api.RequestError(f"prompt is {len(p)} tokens; this server is compiled for prompts "
                                   f"of at most {lim.max_messages} tokens (largest prompt bucket)",
                                   "prompt", "prompt_too_long")


def prepare_completion(raw: bytes, gen: Generator, lim: IntakeLimits) -> PreparedCompletion:
    """/v1/completions: raises api.RequestError or generator.LimitError (param ``prompt``)."""
    body = load_json(raw)
    if not isinstance(body, dict):
        raise api.RequestError("request body must be a JSON object")
    _check_prompt_size(body, lim)
    req = api.parse_completion_request(body, gen.model_id)
    check_logit_bias(req.sampling, gen)
    tok = gen.chat.tokenizer
    vocab = len(tok)
    ids, texts, max_new = [], [], []
    for p in req.prompts:
        if isinstance(p, str):
            # As vLLM tokenizes a completion prompt: add_special_tokens defaults to true there.
            pid = tok.encode(p, add_special_tokens=True)
            texts.append(p)
        else:
            bad = next((t for t in p if not 0 <= t < vocab), None)
            if bad is not None:
                raise api.RequestError(f"prompt holds token id {bad}, outside this model's vocabulary "
                                       f"(0..{vocab - 1})", "prompt", "invalid_token")
            pid = list(p)
            texts.append(tok.decode(pid))
        try:
            max_new.append(gen.limits.resolve_max_tokens(len(pid), req.max_tokens))
        except LimitError as exc:
            raise LimitError(str(exc), "prompt" if exc.param == "messages" else exc.param, exc.code) from None
        ids.append(pid)
    return PreparedCompletion(req, ids, texts, max_new, constraint(req, gen))


def sampling_params(max_new: int, temperature: float, top_p: float, ignore_eos: bool, sampling: api.Sampling,
                    index: int = 0, **extra) -> SamplingParams:
    """One sequence's settings; sequence ``index`` of a seeded request gets ``seed + index``, as
    vLLM seeds the children of an n > 1 request (vllm/v1/engine/parallel_sampling.py
    ``ParentRequest._get_child_sampling_params``)."""
    return SamplingParams(max_new, temperature, top_p, ignore_eos, top_k=sampling.top_k,
                          seed=None if sampling.seed is None else sampling.seed + index,
                          presence_penalty=sampling.presence_penalty,
                          frequency_penalty=sampling.frequency_penalty,
                          repetition_penalty=sampling.repetition_penalty, logit_bias=sampling.logit_bias, **extra)
