"""Reference OpenAI-compatible server with known pacing that records what it actually sent.

    python -m harness.calibration.refserver --port 8123 --ttft-ms 120 --itl-ms 10 --tokens-per-chunk 2 \
        --usage vllm|final|continuous|none [--role-chunk] [--output-tokens 64]

Each stream: a role-only first chunk (optional), then chunks of ``tokens_per_chunk`` words, the
first at receipt + TTFT, each next one ``tokens_per_chunk * itl`` later (absolute schedule, so
lateness does not accumulate), a finish_reason, a usage chunk (``final``) or usage on every
chunk (``continuous``) or, like vLLM, as the request asks (``vllm``: ``include_usage``,
``continuous_usage_stats``), then ``[DONE]``. Output length is ``max_tokens`` unless
``--output-tokens`` fixes it. Each token is one word from a fixed vocabulary (one token in the
WordLevel tokenizer ``harness.calibration.fidelity`` builds).

The server's truth is its own record, not the nominal pacing: per request the receipt time and
the send time and token count of every chunk (``time.perf_counter_ns``, comparable with the
client's on the same machine; wall time too, for clients that only keep wall clocks).

    GET  /records        what was sent (JSON list); DELETE /records clears it
    POST /control        change settings live, e.g. {"fault": "http_500", "fault_every": 3}
    GET  /v1/models      one model

Faults (every ``fault_every``-th request): ``http_500``, ``http_429``, ``drop`` (the connection
is cut after ``drop_after`` tokens), ``hang`` (sends the role chunk, then nothing for an hour),
``garbage`` (an unparseable chunk).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, fields
from typing import Any

from aiohttp import web, web_protocol

from harness.procs import stop
from kit.cli import OneLineParser, one_line_errors

MODEL = "ref-model"
VOCAB = tuple(f"w{i}" for i in range(512))


@dataclass
class Settings:
    ttft_ms: float = 120.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    usage: str = "vllm"  # none | final | continuous | vllm (as asked: include_usage, continuous_usage_stats)
    role_chunk: bool = True
    output_tokens: int = 0  # 0: max_tokens from the request
    fault: str = "none"  # none | http_500 | http_429 | drop | hang | garbage
    fault_every: int = 0  # 0: never
    drop_after: int = 4
    record: bool = True


class _StampingHandler(web_protocol.RequestHandler):
    """Stamps when a request's first bytes arrive, before this server's own event loop gets
    round to the handler: a burst of requests must not hide server-side queueing from the
    truth the clients are compared with."""

    arrival_ns: int | None = None

    def data_received(self, data: bytes) -> None:
        if data[:4] in (b"POST", b"GET ", b"DELE"):  # the start of a request, not more of a body
            self.arrival_ns = time.perf_counter_ns()
        super().data_received(data)


class _Runner(web.AppRunner):
    async def _make_server(self):  # type: ignore[override]
        server = await super()._make_server()
        server.__class__ = type("_StampingServer", (type(server),),
                                {"__call__": lambda self: _StampingHandler(self, loop=self._loop, **self._kwargs)})
        return server


class RefServer:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.records: list[dict[str, Any]] = []
        self.count = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", lambda r: web.Response(text="ok"))
        app.router.add_get("/records", self.get_records)
        app.router.add_delete("/records", self.clear_records)
        app.router.add_post("/control", self.control)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def get_records(self, request: web.Request) -> web.Response:
        return web.Response(body=json.dumps(self.records), content_type="application/json")

    async def clear_records(self, request: web.Request) -> web.Response:
        self.records = []
        self.count = 0
        return web.json_response({"cleared": True})

    async def control(self, request: web.Request) -> web.Response:
        body = await request.json()
        names = {f.name: f.type for f in fields(Settings)}
        for k, v in body.items():
            if k not in names:
                return web.json_response({"error": f"unknown setting {k}"}, status=400)
            setattr(self.s, k, v)
        return web.json_response(asdict(self.s))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        t_handler = time.perf_counter_ns()
        wall_recv = time.time()
        proto = request.protocol
        t_recv = getattr(proto, "arrival_ns", None) or t_handler
        body = await request.json()
        s = self.s
        self.count += 1
        n = self.count
        fault = s.fault if s.fault_every and n % s.fault_every == 0 else "none"
        chat = request.path.endswith("/chat/completions")
        rec: dict[str, Any] = {"id": request.headers.get("X-Request-Id", f"srv-{n}"), "n": n,
                               "t_recv_ns": t_recv, "t_handler_ns": t_handler,
                               "wall_recv": wall_recv - (t_handler - t_recv) / 1e9, "fault": fault,
                               "chunk_ns": [], "chunk_tokens": [], "wall_first": None}
        if s.record:
            self.records.append(rec)
        if fault == "http_500":
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        if fault == "http_429":
            return web.json_response({"error": {"message": "slow down"}}, status=429)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        total = s.output_tokens or max_tokens
        opts = body.get("stream_options") or {}
        if s.usage == "vllm":  # like vLLM: usage only when asked for, per chunk only if asked
            want_usage = bool(opts.get("include_usage"))
            continuous = want_usage and bool(opts.get("continuous_usage_stats"))
        else:
            want_usage = s.usage != "none"
            continuous = s.usage == "continuous"
        prompt_tokens = _prompt_tokens(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        cid = f"cmpl-{n}"
        created = int(wall_recv)
        write = resp.write

        # Chunks are formatted from prebuilt byte templates: json.dumps per chunk would make the
        # server, not the client under test, the bottleneck at tens of thousands of chunks/s.
        head = (b'data: {"id":"' + cid.encode() + b'","object":"'
                + (b"chat.completion.chunk" if chat else b"text_completion")
                + b'","created":' + str(created).encode() + b',"model":"' + MODEL.encode()
                + b'","choices":[{"index":0,')
        usage_tpl = ',"usage":{"prompt_tokens":%d,"completion_tokens":%%d,"total_tokens":%%d}' % prompt_tokens

        def chunk(delta_text: str | None, done_tokens: int, finish: str | None = None,
                  role: bool = False) -> bytes:
            if role:
                body = '"delta":{"role":"assistant","content":""}'
            elif chat:
                body = '"delta":{"content":"%s"}' % delta_text
            else:
                body = '"text":"%s"' % delta_text
            tail = ',"logprobs":null,"finish_reason":%s}]' % ('"%s"' % finish if finish else "null")
            if continuous and want_usage:
                tail += usage_tpl % (done_tokens, prompt_tokens + done_tokens)
            return head + (body + tail + "}\n\n").encode()

        try:
            if s.role_chunk and chat:
                await write(chunk(None, 0, role=True))
            if fault == "hang":
                await asyncio.sleep(3600)
            step_ns = int(s.itl_ms * 1e6 * s.tokens_per_chunk)
            t_next = t_recv + int(s.ttft_ms * 1e6)
            sent = 0
            while sent < total:
                k = min(s.tokens_per_chunk, total - sent)
                delay = (t_next - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                if fault == "drop" and sent >= s.drop_after:
                    request.transport.close()  # cut mid-stream: no finish, no [DONE]
                    return resp
                text = "".join(" " + VOCAB[(sent + j) % len(VOCAB)] for j in range(k))
                sent += k
                data = chunk(text, sent, "length" if sent >= total else None)
                if fault == "garbage" and sent == k:
                    data = b"data: {not json\n\n"
                t = time.perf_counter_ns()
                await write(data)
                rec["chunk_ns"].append(t)
                rec["chunk_tokens"].append(k)
                if rec["wall_first"] is None:
                    rec["wall_first"] = time.time()
                t_next += step_ns
            if want_usage and not continuous:
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": total,
                         "total_tokens": prompt_tokens + total}
                await write(b"data: " + json.dumps({"id": cid, "object": "chat.completion.chunk",
                                                    "created": created, "model": MODEL,
                                                    "choices": [], "usage": usage}).encode() + b"\n\n")
            await write(b"data: [DONE]\n\n")
            rec["t_done_ns"] = time.perf_counter_ns()
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            rec["client_gone"] = True
            raise
        return resp


def _prompt_tokens(body: dict) -> int:
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"])
    else:
        text = str(body.get("prompt", ""))
    return len(text.split())


class RefServerProcess:
    """The reference server in its own process (``--port 0``), driven over HTTP: what the
    fidelity script and the bench tests both start. ``prefix`` is e.g. ``taskset -c 1``."""

    def __init__(self, prefix: list[str] | None = None, cwd: str | None = None) -> None:
        cmd = [*(prefix or []), sys.executable, "-m", "harness.calibration.refserver", "--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"reference server did not start: {line!r}")
        self.url = line.split()[-1]
        self.base_url = self.url + "/v1"

    def call(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def configure(self, **settings: Any) -> None:
        """New pacing/fault settings, and a fresh record of what was sent."""
        self.call("POST", "/control", settings)
        self.call("DELETE", "/records")

    def records(self) -> list[dict]:
        return self.call("GET", "/records")

    def stop(self) -> None:
        stop(self.proc, grace=10)


@one_line_errors("python -m harness.calibration.refserver")
def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m harness.calibration.refserver", description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed on stdout)")
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            typ = {"float": float, "int": int, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            ap.add_argument(flag, type=typ, default=f.default)
    args = ap.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    if settings.usage not in ("none", "final", "continuous", "vllm"):
        ap.error(f"--usage {settings.usage!r}: one of none, final, continuous, vllm")
    try:
        from uvloop import run
    except ImportError:  # pragma: no cover
        run = asyncio.run
    run(_serve(RefServer(settings), args.host, args.port))
    return 0


async def _serve(server: RefServer, host: str, port: int) -> None:
    runner = _Runner(server.app(), access_log=None, handle_signals=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    actual = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://{host}:{actual}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
