"""A local OpenAI-compatible chat server playing scripted models, streaming SSE like vLLM.

Each script decides, from the request body, whether to answer with a tool call or with text.
The server runs aiohttp on 127.0.0.1 in a thread of its own and records every request body.
"""
from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any, Callable

from aiohttp import web

Reply = dict[str, Any]  # {"tool": name, "arguments": str} | {"text": str} | {"status": int}


def _tool_result(body: dict[str, Any]) -> str | None:
    for m in body.get("messages", []):
        if m.get("role") == "tool":
            c = m.get("content")
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            return str(c)
    return None


def tool_then_quote(arguments: str) -> Callable[[dict, int], Reply]:
    """Call count_ids with ``arguments`` (raw JSON text), then quote the count it returned."""

    def script(body: dict, _n: int) -> Reply:
        result = _tool_result(body)
        if result is None:
            return {"tool": "count_ids", "arguments": arguments}
        try:
            count = json.loads(result)["count"]
        except (ValueError, KeyError, TypeError):
            count = 8  # the tool failed: a plausible guess, which must not pass
        return {"text": f"I counted {count} records with the filter.\nAnswer: {count}"}

    return script


def text_only(text: str) -> Callable[[dict, int], Reply]:
    return lambda body, n: {"text": text}


def throttle_first(inner: Callable[[dict, int], Reply], times: int = 1) -> Callable[[dict, int], Reply]:
    return lambda body, n: {"status": 429} if n < times else inner(body, n)


SCRIPTS: dict[str, Callable[[dict, int], Reply]] = {
    "good": tool_then_quote(json.dumps({"filters": ["id >= 10"]})),
    "wrong-filter": tool_then_quote(json.dumps({"filters": ["id > 10"]})),
    "no-tool": text_only("There are 8 such records.\nAnswer: 8"),
    "malformed": tool_then_quote('{"filters": ["id >= 10"'),
    "plain": text_only("Counting the ids 11, 12, 15, 18, 21, 24, 27 and 30.\nAnswer: 8"),
}


def _chunk(model: str, delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion.chunk",
                           "created": 0, "model": model,
                           "choices": [] if delta is None else
                           [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class FakeOpenAI:
    def __init__(self, script: Callable[[dict, int], Reply], model: str = "fake/model",
                 token_delay: float = 0.0, stall: float = 0.0):
        """``stall``: a text answer sends its role chunk, then nothing for ``stall`` seconds or
        until ``stop()`` (a model far slower than any timeout under test, however slow or fast the
        machine running the test is; bounded, so a timeout that is not honoured fails the test
        with a finished answer instead of hanging it)."""
        self.script, self.model, self.token_delay, self.stall = script, model, token_delay, stall
        self._released: asyncio.Event | None = None
        self.requests: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        n = len(self.requests)
        self.requests.append(body)
        reply = self.script(body, n)
        if "status" in reply:
            return web.json_response({"error": {"message": "slow down", "type": "rate_limit"}},
                                     status=reply["status"])
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
                "prompt_tokens": 50, "completion_tokens": len(pieces), "total_tokens": 50 + len(pieces)}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def start(self) -> "FakeOpenAI":
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        ready = threading.Event()

        async def boot() -> None:
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(boot(), self._loop).result(10)
        ready.wait(10)
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
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
