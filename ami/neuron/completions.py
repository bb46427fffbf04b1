"""POST /v1/completions: raw prompts (text or token ids), ``echo`` and log-probabilities.

What lm-evaluation-harness's ``local-completions`` model sends for a log-likelihood task
(``LocalCompletionsAPI._create_payload`` in lm_eval/models/openai_completions.py, lm-eval 0.4.13:
``{"prompt": [token ids], "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": ...,
"echo": true}``) and what it reads back (``parse_logprobs``: ``choices[].logprobs.token_logprobs``
and ``top_logprobs`` from the context's length to the last-but-one entry: the prompt's tokens,
then one generated token). Each prompt of a request is its own sequence in the scheduler; the
answer has one choice per prompt, in order. Shapes: ``api.TextCompletion``,
``api.completion_logprobs`` (vLLM's, see api.py).

Generated text leaves special tokens out and never includes the stop token's text (vLLM's
``skip_special_tokens=True``); log-probabilities and usage count every generated token, the stop
token included. ``echo`` writes the prompt back first: the text as sent, or the ids decoded.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from aiohttp import web

from . import api
from .generator import Generator, SamplingParams
from .intake import PreparedCompletion, sampling_params
from .scheduler import PromptLogprobs, Sampled
from .stops import StopMatcher


@dataclass
class _Choice:
    """One prompt's sequence as it comes back."""

    index: int
    prompt_ids: list[int]
    prompt_text: str
    decoder: object
    stop_ids: frozenset
    stops: StopMatcher = field(default_factory=lambda: StopMatcher(()))
    tokens: int = 0
    finish_reason: str = "length"
    prompt_entries: list | None = None  # (token, None) then Sampled per prompt token
    entries: list = field(default_factory=list)  # Sampled per generated token

    def prompt_logprobs(self, item: PromptLogprobs) -> None:
        self.prompt_entries = [(self.prompt_ids[0], None)] + list(item.entries[1:])

    def token(self, item) -> str | None:
        """Text the token adds; None once the stop token ended the sequence."""
        self.tokens += 1
        if isinstance(item, Sampled):
            self.entries.append(item)
            token = item.token
        else:
            token = item
        if token in self.stop_ids:
            self.finish_reason = "stop"
            return None
        piece = self.stops.feed(self.decoder.push(token))
        if self.stops.stopped is not None:  # a stop string: this piece is the last
            self.finish_reason = "stop"
        return piece

    @property
    def done(self) -> bool:
        return self.stops.stopped is not None

    def tail(self) -> str:
        """The text held back at the end: the decoder's and the stop matcher's."""
        if self.done:
            return ""
        return self.stops.feed(self.decoder.flush()) + self.stops.flush()


def _params(prep: PreparedCompletion) -> list[SamplingParams]:
    """Per prompt, ``n`` sequences (OpenAI's order: choice ``prompt * n + j``), sequence j of a
    seeded request seeded ``seed + j`` as vLLM seeds the children of an n > 1 request."""
    req = prep.request
    prompt_lp = req.logprobs if req.echo and req.logprobs is not None else None
    return [sampling_params(m, req.temperature, req.top_p, req.ignore_eos, req.sampling, j,
                            logprobs=req.logprobs, prompt_logprobs=prompt_lp,
                            allowed=prep.allowed() if prep.allowed else None)  # response_format
            for m in prep.max_new for j in range(req.sampling.n)]


def _choices(gen: Generator, prep: PreparedCompletion) -> list[_Choice]:
    req = prep.request
    stop = frozenset() if req.ignore_eos else gen.chat.stop_ids
    n = req.sampling.n
    return [_Choice(i * n + j, ids, text, gen.chat.decoder(skip_special=True), stop,
                    StopMatcher(req.sampling.stop, req.sampling.include_stop_str_in_output))
            for i, (ids, text) in enumerate(zip(prep.prompt_ids, prep.prompt_texts)) for j in range(n)]


async def respond(request: web.Request, gen: Generator, prep: PreparedCompletion) -> web.StreamResponse:
    """Raises QueueFull (before anything is sent) when the queue cannot take every prompt."""
    n = prep.request.sampling.n
    streams = gen.generate_many([ids for ids in prep.prompt_ids for _ in range(n)], _params(prep))
    # Queued: from here on the rows are this handler's to cancel, whatever ends it (a client gone
    # before the first chunk cancels the handler at its first await, before any pump started).
    try:
        return await _answer(request, gen, prep, streams)
    finally:
        for s in streams:
            await s.aclose()  # frees each row's slot (or queue place) at the next step; idempotent


async def _answer(request: web.Request, gen: Generator, prep: PreparedCompletion, streams: list) -> web.StreamResponse:
    choices = _choices(gen, prep)
    tok = gen.chat.tokenizer

    def text(token: int) -> str:
        return tok.decode([token], skip_special_tokens=False)

    completion = api.TextCompletion(gen.model_id)
    if prep.request.stream:
        return await _stream(request, prep, completion, choices, streams, text)
    parts = await asyncio.gather(*(_collect(c, s) for c, s in zip(choices, streams)))
    out = []
    req = prep.request
    for c, generated in zip(choices, parts):
        entries = ((c.prompt_entries or []) if req.echo else []) + c.entries
        logprobs = None if req.logprobs is None else api.completion_logprobs(entries, text)
        body = (c.prompt_text if req.echo else "") + generated
        out.append(api.TextCompletion.choice(c.index, body, logprobs, c.finish_reason))
    return web.json_response(completion.full(out, sum(len(p) for p in prep.prompt_ids),
                                             sum(c.tokens for c in choices)))


async def _collect(choice: _Choice, stream) -> str:
    pieces = []
    async with contextlib.aclosing(stream):
        async for item in stream:
            if isinstance(item, PromptLogprobs):
                choice.prompt_logprobs(item)
                continue
            piece = choice.token(item)
            if piece is None:
                break
            pieces.append(piece)
            if choice.done:
                break
    pieces.append(choice.tail())
    return "".join(pieces)


async def _stream(request: web.Request, prep: PreparedCompletion, completion: api.TextCompletion,
                  choices: list[_Choice], streams: list, text) -> web.StreamResponse:
    """Server-sent events: per choice, the echo (prompt text and its log-probabilities) first,
    then one chunk per token that adds text or carries log-probabilities, then one with its
    ``finish_reason``; the usage chunk last when asked (``stream_options.include_usage``)."""
    req = prep.request
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    events: asyncio.Queue = asyncio.Queue()
    offsets = [0] * len(choices)

    async def send(choice: _Choice, piece: str, entries: list, finish: str | None = None) -> None:
        logprobs = None
        if req.logprobs is not None:
            logprobs = api.completion_logprobs(entries, text, offsets[choice.index])
        offsets[choice.index] += sum(len(text(e[0])) for e in entries)  # as non-streamed: token spellings
        chunk = completion.chunk(api.TextCompletion.choice(choice.index, piece, logprobs, finish),
                                 usage_field=req.include_usage)
        await resp.write(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")

    async def pump(choice: _Choice, stream) -> None:
        echoed = not req.echo
        try:
            async with contextlib.aclosing(stream):
                async for item in stream:
                    if isinstance(item, PromptLogprobs):
                        choice.prompt_logprobs(item)
                        continue
                    if not echoed:
                        await events.put((choice, choice.prompt_text, choice.prompt_entries or [], None))
                        echoed = True
                    before = len(choice.entries)
                    piece = choice.token(item)
                    new = choice.entries[before:]
                    if piece is None:
                        await events.put((choice, "", new, None))
                        break
                    if piece or new:
                        await events.put((choice, piece, new, None))
                    if choice.done:
                        break
            if not echoed:
                await events.put((choice, choice.prompt_text, choice.prompt_entries or [], None))
            await events.put((choice, choice.tail(), [], choice.finish_reason))
        except Exception as exc:  # noqa: BLE001 - generation failed: the stream says so, then ends
            await events.put(exc)

    tasks = [asyncio.create_task(pump(c, s)) for c, s in zip(choices, streams)]
    try:
        done = 0
        while done < len(choices):
            ev = await events.get()
            if isinstance(ev, BaseException):
                error = api.error_body(str(ev), kind="server_error")
                await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
                break
            choice, piece, entries, finish = ev
            if piece or entries or finish:
                await send(choice, piece, entries, finish)
            done += finish is not None
        else:
            if req.include_usage:
                chunk = completion.usage_chunk(sum(len(p) for p in prep.prompt_ids), sum(c.tokens for c in choices))
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:  # the client went away: its rows free their slots below
        pass
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            await s.aclose()
    return resp
