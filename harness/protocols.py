"""The protocol registry: one entry per way the harness speaks to an endpoint, keyed by the one
protocol word an ``Endpoint`` (and a catalog ``Backend``) carries.

Every part of the harness that behaves differently per protocol looks it up here instead of
branching on the word: the load benchmark's client (``harness.bench.clients.make_client``), the
agent trial's Strands model (``harness.agent.providers.build_model``), the accuracy stage's ask
function (``harness.accuracy.client.target_for``), and the fields an endpoint must have before
any of them can be built. Adding a protocol is one entry here plus what it names; nothing
else changes.

The pattern is GuideLLM's backend registry (vllm-project/guidellm
``src/guidellm/backends/backend.py``: ``@Backend.register("openai_http")`` and
``Backend.create(args)``, which looks the type word up and raises ``ValueError`` naming the
registered types). Here the builders are named as ``"module:function"`` and imported on first
use, like packaging entry points: this module imports nothing of the harness, so every consumer
can import it without a cycle, and the benchmark never loads Strands.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Protocol:
    word: str
    # Endpoint fields that must be set before the harness can speak it: (field, what it is).
    needs: tuple[tuple[str, str], ...]
    # build(endpoint, *, client, vllm_extras, api_key, request_timeout) -> harness.bench.clients.Client
    bench_client: str
    # build(endpoint, *, timeout, max_tokens, temperature, client, boto_session) -> strands Model
    agent_model: str
    # build(endpoint, settings, boto_session) -> ask(messages) -> reply text (harness.accuracy)
    accuracy_ask: str


PROTOCOLS: dict[str, Protocol] = {
    p.word: p
    for p in [
        Protocol("openai", (("base_url", "base URL (for an EC2 backend: the tunnel is not open)"),),
                 "harness.bench.clients.openai:for_endpoint", "harness.agent.providers:openai_model",
                 "harness.accuracy.client:openai_for"),
        Protocol("sagemaker", (("endpoint_name", "SageMaker endpoint name"),),
                 "harness.bench.clients.sagemaker:for_endpoint", "harness.agent.providers:sagemaker_model",
                 "harness.accuracy.client:sagemaker_for"),
        Protocol("bedrock", (),
                 "harness.bench.clients.bedrock:for_endpoint", "harness.agent.providers:bedrock_model",
                 "harness.accuracy.client:bedrock_for"),
    ]
}
WORDS: tuple[str, ...] = tuple(PROTOCOLS)


def get(word: str) -> Protocol:
    try:
        return PROTOCOLS[word]
    except KeyError:
        raise ValueError(f"protocol {word!r} is not one of {', '.join(WORDS)}") from None


def ready(endpoint: Any) -> Protocol:
    """The endpoint's protocol, after checking it has what that protocol needs (ValueError naming
    the endpoint and the missing field otherwise)."""
    p = get(endpoint.protocol)
    for name, what in p.needs:
        if not getattr(endpoint, name):
            raise ValueError(f"endpoint {endpoint.name}: protocol {p.word} needs {name}, the {what}")
    return p


def load(ref: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function (imported now)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
