"""What the HTTP clients share: the OpenAI chat-completions body and the HTTP error class."""
from __future__ import annotations

from typing import Any

from harness.bench.profiles import BenchRequest


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
