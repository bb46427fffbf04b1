"""The one interface the load generator drives: ``await backend.stream(request, record)``.

A backend sends one ``BenchRequest``, fills the ``Record`` (send time, token chunks with their
arrival times, usage, finish reason, or an error class) and returns it. It never raises for a
failed request; cancellation (the driver's timeout) propagates after the record is closed.

    backend = make_backend(endpoint)        # OpenAI-compatible, SageMaker or Bedrock
    await backend.start(max_concurrency)
    rec = await backend.stream(req, Record(...))
    await backend.close()
"""
from __future__ import annotations

from typing import Any, Protocol

from harness.bench.profiles import BenchRequest
from harness.bench.record import Record
from harness.endpoint import Endpoint


class Backend(Protocol):
    kind: str
    model: str

    async def start(self, max_concurrency: int) -> None: ...

    async def stream(self, request: BenchRequest, record: Record) -> Record: ...

    async def close(self) -> None: ...


def make_backend(endpoint: Endpoint, *, client: Any = None, vllm_extras: bool = True,
                 api_key: str | None = None, request_timeout: float = 600.0) -> Backend:
    """``client``: an injected boto3 client (tests, or a caller with its own session)."""
    if endpoint.kind == "openai":
        from harness.bench.backends.openai import OpenAIBackend
        if not endpoint.base_url:
            raise ValueError(f"endpoint {endpoint.name}: an openai endpoint needs base_url")
        return OpenAIBackend(endpoint.base_url, endpoint.model_id, vllm_extras=vllm_extras,
                             api_key=api_key)
    if endpoint.kind == "sagemaker":
        from harness.bench.backends.sagemaker import SageMakerBackend
        if not endpoint.endpoint_name:
            raise ValueError(f"endpoint {endpoint.name}: a sagemaker endpoint needs endpoint_name")
        return SageMakerBackend(endpoint.endpoint_name, endpoint.model_id, region=endpoint.region,
                                client=client, vllm_extras=vllm_extras,
                                read_timeout=request_timeout)
    if endpoint.kind == "bedrock":
        from harness.bench.backends.bedrock import BedrockBackend
        return BedrockBackend(endpoint.model_id, region=endpoint.region, client=client,
                              read_timeout=request_timeout)
    raise ValueError(f"endpoint {endpoint.name}: kind {endpoint.kind!r} is not one of "
                     "openai, sagemaker, bedrock")


def chat_body(req: BenchRequest, model: str, *, vllm_extras: bool) -> dict[str, Any]:
    """The OpenAI chat-completions body (also what the SageMaker vLLM container accepts)."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    messages.append({"role": "user", "content": req.prompt})
    body: dict[str, Any] = {"messages": messages, "max_tokens": req.max_tokens,
                            "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}
    if model:  # a SageMaker container serves one model; without a name it uses that one
        body["model"] = model
    if vllm_extras:
        # usage on every chunk gives exact tokens per chunk; ignore_eos/min_tokens fix the length
        body["stream_options"]["continuous_usage_stats"] = True
        if req.fixed_output:
            body["ignore_eos"] = True
            body["min_tokens"] = req.max_tokens
    return body


def http_error_class(status: int) -> str:
    return "throttled" if status == 429 else f"http_{status}"
