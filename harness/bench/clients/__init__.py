"""The one interface the load generator drives: ``await client.stream(request, record)``.

A client sends one ``BenchRequest``, fills the ``Record`` (send time, token chunks with their
arrival times, usage, finish reason, or an error class) and returns it. It never raises for a
failed request; cancellation (the driver's timeout) propagates after the record is closed.

    client = make_client(endpoint)          # OpenAI-compatible, SageMaker or Bedrock
    await client.start(max_concurrency)
    rec = await client.stream(req, Record(...))
    await client.close()

Modules: openai, sagemaker, bedrock (one client per protocol), boto (what the two boto3
clients share), body (the OpenAI chat body the openai and sagemaker clients send). None of them
imports this package's ``__init__``.
"""
from __future__ import annotations

from typing import Any, Protocol

from harness import protocols
from harness.bench.profiles import BenchRequest
from harness.bench.record import Record
from harness.endpoint import Endpoint


class Client(Protocol):
    protocol: str
    model: str

    async def start(self, max_concurrency: int) -> None: ...

    async def stream(self, request: BenchRequest, record: Record) -> Record: ...

    async def close(self) -> None: ...


def make_client(endpoint: Endpoint, *, client: Any = None, vllm_extras: bool = True,
                api_key: str | None = None, request_timeout: float = 600.0) -> Client:
    """The client for ``endpoint``'s protocol (harness.protocols). ``client``: an injected boto3
    client (tests, or a caller with its own session). ValueError names a missing field."""
    build = protocols.load(protocols.ready(endpoint).bench_client)
    return build(endpoint, client=client, vllm_extras=vllm_extras, api_key=api_key,
                 request_timeout=request_timeout)
