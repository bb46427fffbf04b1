"""Strands model providers for an ``Endpoint``: OpenAI-compatible, SageMaker, Bedrock.

``build_model`` picks the provider through the protocol registry (harness.protocols); each
``*_model`` function is one registry entry. Clients can be injected (tests pass moto's SageMaker
runtime or a recorded Bedrock client); in a real run they are built from the default boto3
session with per-call timeouts and no silent retries below the agent (the trial does its own,
visible, backoff on throttling).
"""
from __future__ import annotations

from typing import Any

from botocore.config import Config as BotocoreConfig

from harness import protocols
from harness.endpoint import Endpoint

# OpenAI-compatible servers are given a placeholder key: vLLM accepts any when none is set.
PLACEHOLDER_API_KEY = "not-needed"


def build_model(endpoint: Endpoint, *, timeout: float = 60.0, max_tokens: int = 512,
                temperature: float = 0.0, client: Any = None, boto_session: Any = None):
    """A Strands ``Model`` speaking to ``endpoint``.

    ``client``: for protocol ``sagemaker`` a ``sagemaker-runtime`` client, for ``bedrock`` a
    ``bedrock-runtime`` client; replaces the one Strands builds (the seam the tests use).
    """
    build = protocols.load(protocols.ready(endpoint).agent_model)
    return build(endpoint, timeout=timeout, max_tokens=max_tokens, temperature=temperature,
                 client=client, boto_session=_session_for(endpoint, boto_session))


def openai_model(endpoint: Endpoint, *, timeout: float, max_tokens: int, temperature: float,
                 client: Any = None, boto_session: Any = None):
    from strands.models.openai import OpenAIModel

    client_args: dict[str, Any] = {"base_url": endpoint.base_url, "api_key": PLACEHOLDER_API_KEY,
                                   "timeout": timeout, "max_retries": 0}
    if endpoint.auth:  # credentials from an --endpoint URL; the SDK lets default_headers win
        client_args["default_headers"] = {"Authorization": endpoint.auth}
    return OpenAIModel(
        client_args=client_args,
        model_id=endpoint.model_id,
        params={"max_tokens": max_tokens, "temperature": temperature},
    )


def sagemaker_model(endpoint: Endpoint, *, timeout: float, max_tokens: int, temperature: float,
                    client: Any = None, boto_session: Any = None):
    from strands.models.sagemaker import SageMakerAIModel

    endpoint_config: dict[str, Any] = {"endpoint_name": endpoint.endpoint_name}
    if endpoint.region:
        endpoint_config["region_name"] = endpoint.region
    # stream=False: InvokeEndpoint returns the server's token usage, which Strands' streaming
    # path for SageMaker does not report; the trial needs tokens, not time to first token.
    model = SageMakerAIModel(
        endpoint_config=endpoint_config,
        payload_config={"max_tokens": max_tokens, "temperature": temperature, "stream": False},
        boto_session=boto_session,
        boto_client_config=_boto_config(timeout),
    )
    if client is not None:
        model.client = client
    return model


def bedrock_model(endpoint: Endpoint, *, timeout: float, max_tokens: int, temperature: float,
                  client: Any = None, boto_session: Any = None):
    from strands.models.bedrock import BedrockModel

    kwargs: dict[str, Any] = {"model_id": endpoint.model_id, "max_tokens": max_tokens,
                              "temperature": temperature,
                              "boto_client_config": _boto_config(timeout)}
    if boto_session is not None:
        kwargs["boto_session"] = boto_session
    elif endpoint.region:
        kwargs["region_name"] = endpoint.region
    model = BedrockModel(**kwargs)
    if client is not None:
        model.client = client
    return model


def _session_for(endpoint: Endpoint, session: Any) -> Any:
    """Strands builds its boto3 client from the session's region, not the endpoint's. For a
    backend in another region than the run's session, return None: Strands then makes a session
    of the endpoint's region from the same default credential chain (a boto3 Session built on the
    run's botocore session would move that session's region too)."""
    if session is None or not endpoint.region or session.region_name == endpoint.region:
        return session
    return None


def _boto_config(timeout: float) -> BotocoreConfig:
    # Throttling is retried by the agent's ModelRetryStrategy, so botocore makes one attempt.
    return BotocoreConfig(read_timeout=timeout, connect_timeout=min(timeout, 10.0),
                          retries={"max_attempts": 1, "mode": "standard"})
