"""The one interface the load generator drives: ``await client.stream(request, record)``.

A client sends one ``BenchRequest``, fills the ``Record`` (send time, token chunks with their
arrival times, usage, finish reason, or an error class) and returns it. It never raises for a
failed request; cancellation (the driver's timeout) propagates after the record is closed.

    client = make_client(endpoint)          # OpenAI-compatible, SageMaker or Bedrock
    await client.start(max_concurrency)
    rec = await client.stream(req, Record(...))
    await client.close()

Modules: openai, sagemaker, bedrock (one client per protocol), boto (what the two boto3
clients share), body (the chat body both HTTP clients send). None of them imports this package's
``__init__``.
"""
from __future__ import annotations

from typing import Any, Protocol

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
    """``client``: an injected boto3 client (tests, or a caller with its own session)."""
    if endpoint.protocol == "openai":
        from harness.bench.clients.openai import OpenAIClient
        if not endpoint.base_url:
            raise ValueError(f"endpoint {endpoint.name}: an openai endpoint needs base_url")
        return OpenAIClient(endpoint.base_url, endpoint.model_id, vllm_extras=vllm_extras,
                            api_key=api_key)
    if endpoint.protocol == "sagemaker":
        from harness.bench.clients.sagemaker import SageMakerClient
        if not endpoint.endpoint_name:
            raise ValueError(f"endpoint {endpoint.name}: a sagemaker endpoint needs endpoint_name")
        return SageMakerClient(endpoint.endpoint_name, endpoint.model_id, region=endpoint.region,
                               client=client, vllm_extras=vllm_extras,
                               read_timeout=request_timeout)
    if endpoint.protocol == "bedrock":
        from harness.bench.clients.bedrock import BedrockClient
        return BedrockClient(endpoint.model_id, region=endpoint.region, client=client,
                             read_timeout=request_timeout)
    raise ValueError(f"endpoint {endpoint.name}: protocol {endpoint.protocol!r} is not one of "
                     "openai, sagemaker, bedrock")
