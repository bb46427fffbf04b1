"""The tests' one local OpenAI-compatible server (127.0.0.1, aiohttp, in a thread of its own).

It plays a scripted model: ``script(body, n)`` (the request body and its index among chat
requests) returns ``{"text": str}``, ``{"tool": name, "arguments": raw_json}`` or
``{"status": int}`` (an error reply). It answers like vLLM:

- ``GET /v1/models``;
- ``POST /v1/chat/completions``: streamed as SSE when the body asks (role chunk first, text split
  on spaces or tool arguments in 7-character pieces, finish reason, then the usage chunk when
  ``stream_options.include_usage``), else one JSON ``chat.completion`` with usage;
- ``POST /v1/completions`` with ``echo`` and ``logprobs`` when ``echo_logprobs`` is set (prompt
  tokens split as the tokenizers library's Whitespace pre-tokenizer does; a callable gives the
  last prompt token's logprob), as lm-evaluation-harness's loglikelihood requests need.

Faults on demand: ``refuse`` (request fields answered with a 400 naming the field, as the kit's
engine does), ``die_after`` (after that many answers the server stops listening and drops the
connection unanswered), ``stall`` (a streamed text answer sends its role chunk, then nothing until
``stall`` seconds pass or ``stop()``), ``token_delay`` between streamed pieces, ``middlewares``
(aiohttp middlewares in front, e.g. an authentication check). Every request body is recorded in
``requests`` (chat only, in order) and ``bodies`` (every POST, with its ``path``).
"""
from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from typing import Any, Callable, Iterable

from aiohttp import web

Reply = dict[str, Any]  # {"tool": name, "arguments": str} | {"text": str} | {"status": int}
Script = Callable[[dict, int], Reply]
WORDS = re.compile(r"\w+|[^\w\s]+")  # as the tokenizers library's Whitespace pre-tokenizer splits


def _chunk(model: str, delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion.chunk",
                           "created": 0, "model": model,
                           "choices": [] if delta is None else
                           [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class FakeOpenAI:
    def __init__(self, script: Script, model: str = "fake/model", *, token_delay: float = 0.0,
                 stall: float = 0.0, die_after: int | None = None,
                 echo_logprobs: "bool | Callable[[list[str]], float]" = False, refuse: tuple[str, ...] = (),
                 middlewares: Iterable[Any] = (), prompt_tokens: int = 50):
        self.script, self.model, self.token_delay, self.stall = script, model, token_delay, stall
        self.die_after, self.echo_logprobs, self.refuse = die_after, echo_logprobs, refuse
        self.middlewares, self.prompt_tokens = list(middlewares), prompt_tokens
        self.requests: list[dict[str, Any]] = []  # chat request bodies, in order
        self.bodies: list[dict[str, Any]] = []  # every POST body, with its "path"
        self.answered = 0
        self._dead = False
        self._released: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------------ handlers
    async def _models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _admit(self, req: web.Request) -> dict | None:
        """The body, recorded; None when the server has died (the connection is dropped)."""
        body = await req.json()
        if self.die_after is not None and self.answered >= self.die_after:
            self._die(req)
            return None
        self.bodies.append({"path": req.path, **body})
        return body

    def _die(self, req: web.Request) -> None:
        if not self._dead:
            self._dead = True
            asyncio.ensure_future(self._runner.cleanup())  # stop listening: later connections are refused
        if req.transport is not None:
            req.transport.abort()  # this one ends with no reply

    def _refused(self, body: dict) -> web.Response | None:
        refused = [f for f in self.refuse if body.get(f) not in (None, False, 0, [])]
        if refused:
            return web.json_response({"error": {"message": f"{refused[0]} is not supported", "param": refused[0]}},
                                     status=400)
        return None

    async def _chat(self, req: web.Request) -> web.StreamResponse:
        body = await self._admit(req)
        if body is None:
            return web.Response(status=500)  # never reaches the aborted connection
        refused = self._refused(body)
        if refused is not None:
            return refused
        n = len(self.requests)
        self.requests.append(body)
        reply = self.script(body, n)
        if "status" in reply:
            return web.json_response({"error": {"message": f"scripted {reply['status']}", "type": "scripted"}},
                                     status=reply["status"])
        self.answered += 1
        if not body.get("stream"):
            return web.json_response(self._whole(reply))
        return await self._stream(req, body, reply)

    def _whole(self, reply: Reply) -> dict:
        if "tool" in reply:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "chatcmpl-tool-" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": reply["tool"], "arguments": reply["arguments"]}}]}
            finish, n = "tool_calls", 1
        else:
            message, finish, n = {"role": "assistant", "content": reply["text"]}, "stop", len(reply["text"].split(" "))
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion", "model": self.model,
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": n,
                          "total_tokens": self.prompt_tokens + n}}

    async def _stream(self, req: web.Request, body: dict, reply: Reply) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        await resp.write(_chunk(self.model, {"role": "assistant", "content": ""}))
        pieces: list[str]
        if "tool" in reply:
            args = reply["arguments"]
            await resp.write(_chunk(self.model, {"tool_calls": [{
                "index": 0, "id": "chatcmpl-tool-" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": reply["tool"], "arguments": ""}}]}))
            pieces = [args[i:i + 7] for i in range(0, len(args), 7)]
            for p in pieces:
                await resp.write(_chunk(self.model, {"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
            finish = "tool_calls"
        else:
            pieces = reply["text"].split(" ")
            if self.stall:
                self._released = self._released or asyncio.Event()
                try:
                    await asyncio.wait_for(self._released.wait(), self.stall)
                    return resp  # stopping: the client gave up long ago
                except asyncio.TimeoutError:
                    pass
            for i, p in enumerate(pieces):
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                await resp.write(_chunk(self.model, {"content": p if i == 0 else " " + p}))
            finish = "stop"
        await resp.write(_chunk(self.model, {}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_chunk(self.model, None, usage={
                "prompt_tokens": self.prompt_tokens, "completion_tokens": len(pieces),
                "total_tokens": self.prompt_tokens + len(pieces)}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _completions(self, req: web.Request) -> web.Response:
        body = await self._admit(req)
        if body is None:
            return web.Response(status=500)
        refused = self._refused(body)
        if refused is not None:
            return refused
        if not (self.echo_logprobs and body.get("echo")):
            return web.json_response({"error": {"message": f"{req.path} not served"}}, status=404)
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for i, p in enumerate(prompts):
            toks = WORDS.findall(str(p))
            lps: list[float | None] = [-1.0] * len(toks)
            if callable(self.echo_logprobs):  # the last prompt token's logprob
                lps[-1] = self.echo_logprobs(toks)
            toks, lps = toks + ["x"], [None] + lps[1:] + [-1.0]  # max_tokens 1: one more
            choices.append({"index": i, "text": " ".join(toks), "logprobs": {
                "tokens": toks, "token_logprobs": lps,
                "top_logprobs": [None] + [{t: lp} for t, lp in zip(toks[1:], lps[1:])]}})
        return web.json_response({"id": "x", "object": "text_completion", "model": self.model, "choices": choices})

    async def _not_found(self, req: web.Request) -> web.Response:
        return web.json_response({"error": {"message": f"{req.path} not served"}}, status=404)

    # ------------------------------------------------------------------ life
    def start(self) -> "FakeOpenAI":
        app = web.Application(middlewares=self.middlewares)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

        async def boot() -> None:
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(boot(), self._loop).result(10)
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    url = base_url

    def stop(self) -> None:
        if self._thread is None or self._loop.is_closed():
            return
        if self._released is not None:
            self._loop.call_soon_threadsafe(self._released.set)
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
