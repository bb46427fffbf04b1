"""OpenAI-compatible HTTP server of the Neuron engine (aiohttp).

    python -m ami.neuron.server --device neuron --model DIR --host 127.0.0.1 --port 8000
    python -m ami.neuron.server --device cpu --tiny-random --port 8000

Routes: POST /v1/chat/completions (streamed or not, with tools and log-probabilities),
POST /v1/completions (text or token-id prompts, echo, log-probabilities), GET /v1/models,
GET /health.
Every flag is described in ami/neuron/README.md. Heavy imports (torch, transformers, the
Neuron SDK) happen only after the command line is checked, so a bad flag fails in a blink.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator

from aiohttp import web

from . import api, completions, intake, logs, served, structured
from .cli import DEFAULT_BODY_TIMEOUT_S
from .generator import Generator, LimitError, QueueFull, SamplingParams
from .reasoning import ThoughtStream
from .scheduler import NeverFits, PromptLogprobs, Sampled
from .stops import StopMatcher
from .structured import ArgumentsDelta, ForcedCalls
from .toolcalls import ContentDelta, ToolCall, ToolCallStream

log = logging.getLogger("ami.neuron.server")
GENERATOR = web.AppKey("generator", object)
DEVICE = web.AppKey("device", str)
INTAKE = web.AppKey("intake", object)  # (ThreadPoolExecutor, IntakeLimits)
BODY_TIMEOUT = web.AppKey("body_timeout", float)
MAX_BODY = web.AppKey("max_body", int)
WEIGHTS = web.AppKey("weights", object)  # served.record(): GET /v1/models "weights", or None

ROUTES = "POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health"


def _json_error(status: int, message: str, param=None, code=None, kind="invalid_request_error",
                headers=None):
    return web.json_response(api.error_body(message, param, code, kind), status=status, headers=headers)


def _busy(exc: QueueFull):
    """A full queue: 429 with Retry-After (RFC 9110 section 10.2.3: delay in seconds)."""
    return _json_error(429, str(exc), None, "queue_full", kind="rate_limit_error",
                       headers={"Retry-After": str(exc.retry_after)})


def _token_of(item) -> int:
    return item if isinstance(item, int) else item.token


@web.middleware
async def _errors_as_json(request: web.Request, handler):
    """Every error the server answers is OpenAI-style JSON: routing (404/405), body size (413),
    and anything unexpected (500, logged once, bounded). A client gone away is one INFO line."""
    where = f"{request.method} {request.path[:200]}"
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return _json_error(404, f"no route {where}; this server serves {ROUTES}", None, "not_found")
        if exc.status == 405:
            allow = exc.headers.get("Allow", "")
            return _json_error(405, f"method {request.method} is not allowed on {request.path[:200]}; "
                                    f"allowed: {allow}", None, "method_not_allowed", headers={"Allow": allow})
        if exc.status == 413:
            return _json_error(413, f"request body is larger than {request.app[MAX_BODY]} bytes, the "
                                    "most a request that fits this server's largest prompt bucket "
                                    "can take", None, "body_too_large")
        return _json_error(exc.status, f"{where}: {exc.reason}", None, None)
    except ConnectionResetError as exc:
        log.info("client went away during %s: %s", where, exc)
        return web.Response(status=400)  # nobody reads it; aiohttp drops it quietly
    except asyncio.CancelledError:  # handler_cancellation: the connection was lost mid-request
        log.info("request %s cancelled: the client went away (or the server is stopping)", where)
        raise
    except Exception:
        log.exception("request %s failed", where)
        return _json_error(500, "internal error while serving the request; see the server log",
                           kind="server_error")


async def _events(gen: Generator, stream: AsyncIterator, params: SamplingParams, tools: bool,
                  counter: list[int], stops: StopMatcher | None = None,
                  forced=None) -> AsyncIterator[tuple]:
    """Token ids -> ('content', text) | ('reasoning', text) | ('tool', ToolCall) |
    ('logprob', Sampled) | ('finish', reason, stop string or None).

    The decoded text first meets the request's stop strings (on the whole output, as vLLM
    matches them), then two exact streaming filters: the thought channel (to reasoning), then,
    when the request has tools, the tool-call parser (or, when ``forced`` is a tool choice,
    "required" or a function's name, ``structured.ForcedCalls`` reading the constrained JSON into
    calls and ``ArgumentsDelta`` events). A request with log-probabilities gets one
    'logprob' event per generated token (the stop token included, as usage counts it), before
    that token's text. A stop string ends the row: leaving the loop closes its stream, which
    frees the slot at the next step."""
    decoder = gen.chat.decoder()
    thoughts = ThoughtStream()
    parser = ForcedCalls(forced) if forced is not None else ToolCallStream() if tools else None
    stop_ids = set() if params.ignore_eos else gen.chat.stop_ids
    stops = stops or StopMatcher(())
    reason = "length"

    def route(content: str, reasoning: str, final: bool = False) -> list:
        out: list = [("reasoning", reasoning)] if reasoning else []
        if parser is None:
            out += [ContentDelta(content)] if content else []
        else:
            out += parser.feed(content) if content else []
            out += parser.finish() if final else []
        return out

    async with contextlib.aclosing(stream) as tokens:
        async for item in tokens:
            if isinstance(item, PromptLogprobs):
                continue
            counter[0] += 1
            if isinstance(item, Sampled):
                yield ("logprob", item)
            token = _token_of(item)
            if token in stop_ids:
                reason = "stop"
                break
            text = stops.feed(decoder.push(token))
            if text:
                for ev in route(*thoughts.feed(text)):
                    yield ev
            if stops.stopped is not None:
                reason = "stop"
                break
    tail = "" if stops.stopped is not None else stops.feed(decoder.flush())
    tail += stops.flush()
    for ev in route(*thoughts.feed(tail)) + route(*thoughts.finish(), final=True):
        yield ev
    if parser is not None and parser.calls and reason == "stop" and stops.stopped is None:
        reason = getattr(parser, "finish_reason", "tool_calls")  # a named choice: "stop" (vLLM's)
    yield ("finish", reason, stops.stopped)


def _as_tuple(ev):
    if isinstance(ev, ContentDelta):
        return ("content", ev.text)
    if isinstance(ev, ToolCall):
        return ("tool", ev)
    if isinstance(ev, ArgumentsDelta):
        return ("tool_args", ev)
    return ev[:2]


async def _read_body(request: web.Request):
    """The body's bytes, or an error response (413 refused from Content-Length, 408 too slow)."""
    timeout = request.app[BODY_TIMEOUT]
    if (request.content_length or 0) > request.app[MAX_BODY]:  # refuse before reading any of it
        raise web.HTTPRequestEntityTooLarge(max_size=request.app[MAX_BODY],
                                            actual_size=request.content_length)
    try:
        async with asyncio.timeout(timeout):
            return await request.read()  # 413 past client_max_size, answered by _errors_as_json
    except TimeoutError:
        return _json_error(408, f"request body not received within {timeout:g} s", None, "body_timeout",
                           headers={"Connection": "close"})


async def _prepare(request: web.Request, prepare):
    """Run ``prepare(raw, gen, limits)`` in the intake thread; a response when refused."""
    raw = await _read_body(request)
    if isinstance(raw, web.StreamResponse):
        return raw
    pool, limits = request.app[INTAKE]
    try:
        # JSON, limits, template and tokenizer in the intake thread: the loop keeps serving.
        return await asyncio.get_running_loop().run_in_executor(pool, prepare, raw, request.app[GENERATOR], limits)
    except api.RequestError as exc:
        return _json_error(exc.status, str(exc), exc.param, exc.code, kind=exc.kind)
    except LimitError as exc:
        return _json_error(400, str(exc), exc.param, exc.code)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    gen: Generator = request.app[GENERATOR]
    prepared = await _prepare(request, intake.prepare)
    if isinstance(prepared, web.StreamResponse):
        return prepared
    req, prompt_ids, max_new = prepared.request, prepared.prompt_ids, prepared.max_new
    n = req.sampling.n
    params = [intake.sampling_params(max_new, req.temperature, req.top_p, req.ignore_eos, req.sampling, i,
                              logprobs=req.top_logprobs if req.logprobs else None,
                              allowed=prepared.allowed() if prepared.allowed else None) for i in range(n)]
    completion = api.Completion(gen.model_id)
    try:
        streams = gen.generate_many([prompt_ids] * n, params)
    except NeverFits as exc:
        return _json_error(400, str(exc).replace("prompts", "sequences"), "n", "too_many_sequences")
    except QueueFull as exc:
        return _busy(exc)
    except RuntimeError as exc:  # the engine has stopped (/health says so too)
        return _json_error(503, str(exc), kind="server_error")
    # The request is queued: from here on it is this handler's to cancel, whatever ends it (the
    # client gone before the first chunk cancels the handler at its first await).
    try:
        return await _answer_chat(request, completion, req, streams, params, len(prompt_ids))
    finally:
        for stream in streams:
            await stream.aclose()  # frees the slot (or the queue place) at the next step; idempotent


async def _answer_chat(request, completion, req, streams, params, prompt_tokens):
    gen: Generator = request.app[GENERATOR]
    counters = [[0] for _ in streams]
    forced = req.tool_choice if req.tools is not None and req.tool_choice != "auto" else None
    events = [_events(gen, stream, p, req.tools is not None, counter,
                      StopMatcher(req.sampling.stop, req.sampling.include_stop_str_in_output), forced)
              for stream, p, counter in zip(streams, params, counters)]
    text = _token_text(gen)
    if req.stream:
        return await _stream(request, completion, req, events, prompt_tokens, counters, text)

    async def collect(index: int, evs) -> dict:
        content, reasoning, calls, logprobs, reason, stop = [], [], [], [], "stop", None
        async with contextlib.aclosing(evs):
            async for ev in evs:
                kind, value = _as_tuple(ev)
                if kind == "content":
                    content.append(value)
                elif kind == "reasoning":
                    reasoning.append(value)
                elif kind == "tool":
                    calls.append(api.tool_call_json(value, with_index=False))
                elif kind == "tool_args":
                    calls[value.index]["function"]["arguments"] += value.arguments
                elif kind == "logprob":
                    logprobs.append(api.chat_logprob(value, text))
                else:
                    reason, stop = value, ev[2]
        choice = api.Completion.choice(index, "".join(content), calls, reason, reasoning="".join(reasoning),
                                       logprobs=logprobs if req.logprobs else None, stop_reason=stop)
        if forced is not None:  # vLLM answers a forced tool choice with content "" (content or "")
            choice["message"]["content"] = "".join(content)
        return choice

    try:
        choices = await asyncio.gather(*(collect(i, evs) for i, evs in enumerate(events)))
    except RuntimeError as exc:
        return _json_error(500, str(exc), kind="server_error")
    return web.json_response(completion.full_choices(list(choices), prompt_tokens, sum(c[0] for c in counters)))


def _token_text(gen: Generator):
    """id -> the token's text as log-probabilities spell it (one id decoded, special tokens kept)."""
    tok = gen.chat.tokenizer
    return lambda token: tok.decode([token], skip_special_tokens=False)


async def _stream(request, completion: api.Completion, req, events: list, prompt_tokens: int,
                  counters: list[list[int]], text) -> web.StreamResponse:
    """Server-sent events: each choice's role chunk, then its deltas as they come (choices
    interleaved, each chunk naming its ``index``), its finish chunk; the usage chunk last when
    asked, and usage in every chunk with ``continuous_usage_stats`` (vLLM's extension)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    usage_field = req.include_usage or req.continuous_usage

    async def send(obj) -> None:
        if req.continuous_usage and obj.get("choices"):
            obj["usage"] = api.usage(prompt_tokens, sum(c[0] for c in counters))
        await resp.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")

    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, evs) -> None:
        pending: list[dict] | None = None  # log-probabilities of tokens not yet sent with a chunk
        try:
            async with contextlib.aclosing(evs):
                async for ev in evs:
                    kind, value = _as_tuple(ev)
                    if kind == "logprob":
                        pending = (pending or []) + [api.chat_logprob(value, text)]
                        continue
                    if kind == "content":
                        delta = {"content": value}
                    elif kind == "reasoning":
                        delta = {"reasoning_content": value}
                    elif kind == "tool":
                        delta = {"tool_calls": [api.tool_call_json(value, with_index=True)]}
                    elif kind == "tool_args":  # vLLM's DeltaToolCall with only arguments
                        delta = {"tool_calls": [{"index": value.index, "function": {"arguments": value.arguments}}]}
                    else:
                        await queue.put(completion.chunk({}, finish_reason=value, usage_field=usage_field,
                                                         logprobs=pending, index=index, stop_reason=ev[2]))
                        pending = None
                        continue
                    await queue.put(completion.chunk(delta, usage_field=usage_field, logprobs=pending, index=index))
                    pending = None
            await queue.put(None)
        except Exception as exc:  # noqa: BLE001 - generation failed: the stream says so, then ends
            await queue.put(exc)

    for i in range(len(events)):
        await send(completion.chunk({"role": "assistant", "content": ""}, usage_field=usage_field, index=i))
    tasks = [asyncio.create_task(pump(i, evs)) for i, evs in enumerate(events)]
    try:
        done = 0
        while done < len(tasks):
            item = await queue.get()
            if item is None:
                done += 1
            elif isinstance(item, BaseException):
                await send(api.error_body(str(item), kind="server_error"))
                break
            else:
                await send(item)
        else:
            if req.include_usage:
                await send(completion.usage_chunk(prompt_tokens, sum(c[0] for c in counters)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError as exc:  # the client went away; its rows are cancelled by the caller
        log.info("client %s went away mid-stream (%s)", request.remote, exc)
    finally:
        for t in tasks:
            t.cancel()
    return resp


async def text_completions(request: web.Request) -> web.StreamResponse:
    prepared = await _prepare(request, intake.prepare_completion)
    if isinstance(prepared, web.StreamResponse):
        return prepared
    try:
        return await completions.respond(request, request.app[GENERATOR], prepared)
    except NeverFits as exc:
        return _json_error(400, str(exc), "prompt", "too_many_prompts")
    except QueueFull as exc:
        return _busy(exc)
    except RuntimeError as exc:  # a failed generation, or the engine has stopped
        return _json_error(500, str(exc), kind="server_error")


async def models(request: web.Request) -> web.Response:
    gen: Generator = request.app[GENERATOR]
    return web.json_response({"object": "list", "data": [{
        "id": gen.model_id, "object": "model", "created": int(time.time()), "owned_by": "ami-neuron",
        "max_model_len": gen.limits.max_total_tokens,
        **({"weights": request.app[WEIGHTS]} if request.app.get(WEIGHTS) else {})}]})


async def health(request: web.Request) -> web.Response:
    gen: Generator = request.app[GENERATOR]
    lim = gen.limits
    stats = gen.stats()
    ok = stats.get("running", True)  # a dead scheduler would queue requests forever: say so
    return web.json_response({
        "status": "ok" if ok else "error", "model": gen.model_id, "device": request.app[DEVICE],
        "limits": {"max_prompt_tokens": lim.max_prompt_tokens, "max_total_tokens": lim.max_total_tokens,
                   "max_batch_size": lim.max_batch_size},
        "scheduler": stats,
        **({"simulated": "a paced stand-in for the device (no weights): host-path calibration only"}
           if request.app[DEVICE] == "simulated" else {})}, status=200 if ok else 503)


def runner_options(header_timeout: float) -> dict:
    """aiohttp server options, the same for ``main`` and the tests' in-process server.

    keepalive_timeout: aiohttp's keep-alive timer starts when a connection opens and closes it if
    no complete request head has arrived when it fires (aiohttp 3.14 web_protocol.RequestHandler:
    connection_made / _process_keepalive), so it is also the header timeout.
    logger: aiohttp's own messages go through logs.HTTP_LOG, where a request its HTTP parser
    refuses is one INFO line instead of an ERROR traceback.
    handler_cancellation: a lost connection cancels its handler, so a client that leaves while a
    whole (non-streamed) answer is generated frees its batch slot at once (aiohttp docs, "Web
    handler cancellation")."""
    return {"keepalive_timeout": header_timeout, "handler_cancellation": True, "access_log": None,
            "logger": logs.HTTP_LOG}


def build_app(generator: Generator, device: str, body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
              weights: dict | None = None) -> web.Application:
    limits = intake.IntakeLimits.for_generator(generator)
    app = web.Application(client_max_size=limits.max_body_bytes, middlewares=[_errors_as_json])
    app[GENERATOR] = generator
    app[WEIGHTS] = weights
    app[DEVICE] = device
    app[BODY_TIMEOUT] = body_timeout
    app[MAX_BODY] = limits.max_body_bytes
    # One intake thread: requests are checked and tokenized one at a time, off the event loop
    # (one thread also keeps the tokenizer's encode calls from overlapping).
    app[INTAKE] = (ThreadPoolExecutor(1, thread_name_prefix="intake"), limits)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", text_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)

    async def lifecycle(app: web.Application):
        # structured output's tokenizer, built before the server listens (structured.warm)
        await asyncio.get_running_loop().run_in_executor(app[INTAKE][0], structured.warm, generator.chat)
        await generator.start()
        yield
        await generator.close()
        app[INTAKE][0].shutdown(wait=False, cancel_futures=True)

    app.cleanup_ctx.append(lifecycle)
    return app


def main(argv: list[str] | None = None) -> int:
    from .cli import build_generator, compile_only, parse_args
    args = parse_args(argv)
    logs.setup(args.log_level)
    if args.compile_only:
        log.info("compiled model ready in %s", compile_only(args))
        return 0
    _check_port_free(args.host, args.port)  # before a load that can take minutes on Neuron
    try:
        generator = build_generator(args)
    except (OSError, ValueError, KeyError) as exc:  # unreadable checkpoint: say which, in one line
        first = " ".join(str(exc).split())[:300]
        raise SystemExit(f"python -m ami.neuron.server: error: cannot load --model {args.model!r}: "
                         f"{type(exc).__name__}: {first}") from None
    log.info("serving %s (%s) on http://%s:%d", generator.model_id, args.device, args.host, args.port)
    try:  # what it serves, for the harness's report (ami/neuron/served.py); never stops the server
        weights = served.record(args.model, generator.model_id, args.tiny_random)
    except Exception as exc:  # noqa: BLE001
        log.warning("served weights not recorded: %s: %s", type(exc).__name__, exc)
        weights = None
    try:
        web.run_app(build_app(generator, args.device, args.body_timeout, weights), host=args.host,
                    port=args.port, print=None, handle_signals=True,
                    **runner_options(args.header_timeout))
    except OSError as exc:  # taken between the check and the bind
        raise SystemExit(_bind_error(args.host, args.port, exc)) from None
    return 0


def _bind_error(host: str, port: int, exc: OSError) -> str:
    return (f"python -m ami.neuron.server: error: cannot listen on {host}:{port} "
            f"({exc.strerror or exc}); choose another --port or --host")


def _check_port_free(host: str, port: int) -> None:
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise SystemExit(_bind_error(host, port, exc)) from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            s.bind(addr)
        except OSError as exc:
            raise SystemExit(_bind_error(host, port, exc)) from None


if __name__ == "__main__":
    raise SystemExit(main())
