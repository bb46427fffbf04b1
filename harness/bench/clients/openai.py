"""OpenAI-compatible streaming over aiohttp (vLLM, the Neuron engine, any --base-url).

Lean on purpose: one session, raw ``iter_any`` reads timestamped as they return, the shared
SSE parser, no SDK. Client CPU per chunk is what limits how much load one process can measure.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

try:
    from orjson import dumps
except ImportError:  # pragma: no cover
    import json

    def dumps(o):  # type: ignore[no-redef]
        return json.dumps(o).encode()

from harness.bench.clients.body import chat_body, http_error_class
from harness.bench.profiles import BenchRequest
from harness.bench.record import Record, now_ns
from harness.bench.sse import OpenAIStreamParser
from harness.endpoint import Endpoint


class _StampedBody(aiohttp.BytesPayload):
    """The request body, which stamps the record's send time the moment aiohttp writes it.

    aiohttp (on Python < 3.12) writes the body, with the headers coalesced into it, from a task
    of its own; under a burst of completions that task can run milliseconds after ``post()``
    was called. Stamping here puts that client-side wait into queue time, not into TTFT.
    """

    def __init__(self, value: bytes, record: Record) -> None:
        super().__init__(value, content_type="application/json")
        self._record = record

    async def write_with_length(self, writer, content_length):  # type: ignore[override]
        self._record.mark_sent()
        await super().write_with_length(writer, content_length)


class _ArrivalStamp(asyncio.Protocol):
    """Sits between the socket transport and aiohttp's protocol and notes when bytes arrive.

    Our coroutine reads a chunk only when the event loop gets to it; with dozens of streams
    receiving in the same loop iteration, the last one would be stamped a millisecond or more
    late. ``data_received`` runs as the loop polls the socket, before any of that work.
    """

    __slots__ = ("inner", "t")

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.t = 0

    def data_received(self, data: bytes) -> None:
        self.t = now_ns()
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_made(self, transport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def _stamp(resp: aiohttp.ClientResponse) -> _ArrivalStamp | None:
    conn = resp.connection
    transport = conn.transport if conn is not None else None
    if transport is None or not hasattr(transport, "set_protocol"):
        return None
    cur = transport.get_protocol()
    if not isinstance(cur, _ArrivalStamp):
        cur = _ArrivalStamp(cur)
        transport.set_protocol(cur)
    return cur


def json_answer(raw: bytes) -> tuple[str, str]:
    """(error class, detail) of an HTTP 200 whose body is JSON, not an event stream: an error
    object (``{"error": "model overloaded"}``, OpenAI's ``{"error": {"message": …}}``, vLLM's
    ``{"object": "error", "message": …}``) is
    ``stream_error`` quoting the server's message; a whole chat completion is ``empty`` (the
    server ignored stream: true); anything else is ``protocol``."""
    text = raw[:300].decode("utf-8", "replace")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: 64 KiB of "[" is deeper than Python's parser goes
        return "protocol", f"HTTP 200 application/json that is not JSON: {text}"
    if isinstance(obj, dict) and (obj.get("error") or obj.get("object") == "error"):  # vLLM: object "error"
        err = obj.get("error") or obj
        msg = err.get("message") if isinstance(err, dict) else err
        return "stream_error", f"HTTP 200 with an error body: {msg if isinstance(msg, str) and msg else text}"
    if isinstance(obj, dict) and isinstance(obj.get("choices"), list):
        return "empty", "HTTP 200 application/json instead of an event stream: the server ignored stream: true"
    return "protocol", f"HTTP 200 application/json that is not a chat completion: {text}"


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body up to its end or ``cap`` bytes, whichever comes first."""
    parts, n = [], 0
    while n < cap and (data := await resp.content.read(cap - n)):
        parts.append(data)
        n += len(data)
    return b"".join(parts)


class OpenAIClient:
    protocol = "openai"
    round_trip_how = "GET /models"

    def __init__(self, base_url: str, model: str, *, vllm_extras: bool = True,
                 api_key: str | None = None, auth: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.vllm_extras = vllm_extras
        # SSE is small and streamed: ask for it uncompressed (aiohttp still decompresses if a
        # proxy compresses anyway)
        self.headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        if auth:  # credentials from the URL (harness.endpoint.split_credentials) win
            self.headers["Authorization"] = auth
        self.session: aiohttp.ClientSession | None = None

    async def start(self, max_concurrency: int) -> None:
        if self.session is None:
            conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
            self.session = aiohttp.ClientSession(
                connector=conn, headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=15))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def round_trip(self) -> None:
        """One small request over the streams' session and path (harness.bench.path): any HTTP
        answer is a round trip; a failed connection raises."""
        assert self.session is not None, "start() first"
        async with self.session.get(self.base_url + "/models") as resp:
            await _read_capped(resp, 1 << 20)  # a round trip; a body without end is not read

    async def stream(self, request: BenchRequest, record: Record) -> Record:
        assert self.session is not None, "start() first"
        body = _StampedBody(dumps(chat_body(request, self.model, vllm_extras=self.vllm_extras)),
                             record)
        parser = OpenAIStreamParser(record)
        feed = parser.feed
        try:
            async with self.session.post(self.url, data=body,
                                         headers={"X-Request-Id": record.id}) as resp:
                record.http_status = resp.status
                if resp.status != 200:
                    # the error body up to 64 KiB (read to its end the connection is reused;
                    # a server may send one without end), 300 bytes of it kept
                    detail = (await _read_capped(resp, 1 << 16))[:300].decode("utf-8", "replace")
                    record.fail(http_error_class(resp.status), detail, resp.status)
                    record.finish()
                    return record
                if resp.content_type == "application/json":
                    # a whole JSON answer, not an event stream: an error the server put in a 200
                    # (its message kept), or a server that ignored stream: true
                    record.fail(*json_answer(await _read_capped(resp, 1 << 16)))
                    record.finish()
                    return record
                stamp = _stamp(resp)
                seen = stamp.t if stamp is not None else 0
                readany = resp.content.readany  # no async-iterator layer: this runs per read
                while data := await readany():
                    # the socket's arrival time when bytes arrived since the last read (the
                    # first read on a new connection may predate the stamp: then "now")
                    t = stamp.t if stamp is not None else 0
                    feed(data, t if t > seen else now_ns())
                    seen = t
                    if parser.aborted or record.closed:  # oversized: leaving closes the connection
                        break
                parser.close(now_ns())
        except asyncio.CancelledError:
            record.finish()
            raise
        except aiohttp.ClientConnectorError as e:
            record.fail("connect", str(e))
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError) as e:
            record.fail("dropped", f"{type(e).__name__}: {e}")
        except aiohttp.ClientError as e:
            record.fail("client", f"{type(e).__name__}: {e}")
        if record.error is None and not parser.complete():
            record.fail("dropped", "stream ended without finish_reason or [DONE]")
        record.finish(ok=record.error is None)
        return record


async def discover_model(base_url: str, *, api_key: str | None = None, timeout: float = 15.0,
                         auth: str | None = None) -> str:
    """The first model id the server lists at ``/models``."""
    headers = {"Authorization": auth} if auth else {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        async with s.get(base_url.rstrip("/") + "/models", headers=headers) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{base_url}/models answered HTTP {resp.status}")
            raw = await _read_capped(resp, 1 << 20)  # a model list is small; an endless one is cut
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise RuntimeError(f"{base_url}/models did not answer a JSON model list") from None
    listed = data.get("data") if isinstance(data, dict) else None
    models = [m["id"] for m in (listed if isinstance(listed, list) else [])
              if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
    if not models:
        raise RuntimeError(f"{base_url}/models lists no model; pass --model")
    return models[0]


def for_endpoint(endpoint: Endpoint, *, client: Any = None, vllm_extras: bool = True,
                 api_key: str | None = None, request_timeout: float = 600.0) -> OpenAIClient:
    """The ``openai`` entry of harness.protocols (``client`` and ``request_timeout`` are the boto3
    clients' options: a stream here is bounded by the driver's timeout)."""
    return OpenAIClient(endpoint.base_url or "", endpoint.model_id, vllm_extras=vllm_extras,
                        api_key=api_key, auth=endpoint.auth)
