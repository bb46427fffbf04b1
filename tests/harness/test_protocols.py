"""The protocol registry: every protocol word the catalog uses builds a bench client and a Strands
model of that protocol; a missing field or an unknown word is one clear ValueError."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from kit import catalog

import harness.endpoint
from harness import protocols
from harness.accuracy.client import BackendDown, Settings, target_for
from harness.agent.providers import build_model
from harness.bench.clients import make_client
from harness.endpoint import Endpoint

REPO = Path(__file__).resolve().parents[2]

# One endpoint per protocol, with what that protocol needs.
ENDPOINTS = {
    "openai": Endpoint("local", "openai", "m", base_url="http://127.0.0.1:9/v1"),
    "sagemaker": Endpoint("sagemaker", "sagemaker", "m", region="us-east-1", endpoint_name="ep"),
    "bedrock": Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1"),
}
# The Strands provider each protocol must get (strands-agents: strands.models.*).
STRANDS = {"openai": "OpenAIModel", "sagemaker": "SageMakerAIModel", "bedrock": "BedrockModel"}


def test_every_catalog_protocol_is_registered_and_nothing_else():
    assert {b.protocol for b in catalog.BACKENDS.values()} == set(protocols.WORDS) == set(ENDPOINTS)
    # the type the catalog and Endpoint share (one Literal, kit/catalog.py) names the same words
    assert set(get_args(catalog.Protocol)) == set(protocols.WORDS)
    assert harness.endpoint.Protocol is catalog.Protocol


@pytest.mark.parametrize("word", sorted(ENDPOINTS))
def test_each_protocol_builds_its_bench_client_and_strands_model(word, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    ep = ENDPOINTS[word]
    client = make_client(ep, client=object())
    assert client.protocol == word and client.model == ep.model_id
    assert type(build_model(ep)).__name__ == STRANDS[word]


@pytest.mark.parametrize("ep, field", [
    (Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=8000), "base_url"),
    (Endpoint("sm", "sagemaker", "m", region="us-east-1"), "endpoint_name"),
])
def test_a_missing_field_is_named_before_anything_is_built(ep, field):
    for build in (make_client, build_model):
        with pytest.raises(ValueError, match=f"^endpoint {ep.name}: protocol {ep.protocol} needs {field}, "):
            build(ep)
    # the accuracy stage records it as the backend being down, with the same words
    with pytest.raises(BackendDown, match=f"^endpoint {ep.name}: protocol {ep.protocol} needs {field}, "):
        target_for(ep, Settings())


# The AWS runtime client each protocol's accuracy stage calls (boto3 service names); openai: none.
RUNTIME = {"openai": [], "sagemaker": ["sagemaker-runtime"], "bedrock": ["bedrock-runtime"]}


@pytest.mark.parametrize("word", sorted(ENDPOINTS))
def test_each_protocol_gives_the_accuracy_stage_its_own_runtime(word):
    made = []

    class Session:
        def client(self, service, config=None):
            made.append(service)
            assert config.region_name == "us-east-1"
            return object()

    target = target_for(ENDPOINTS[word], Settings(), boto_session=Session())
    assert made == RUNTIME[word] and callable(target.ask)
    assert target.base_url == ENDPOINTS[word].base_url


def test_an_unknown_protocol_names_the_valid_ones():
    ep = Endpoint("x", "grpc", "m")  # type: ignore[arg-type]
    for build in (make_client, build_model):
        with pytest.raises(ValueError, match="^protocol 'grpc' is not one of openai, sagemaker, bedrock$"):
            build(ep)
    with pytest.raises(BackendDown, match="^protocol 'grpc' is not one of"):
        target_for(ep, Settings())


def test_the_registry_loads_nothing_until_asked():
    """Importing the registry (as the bench, the agent and discovery do) imports no client and
    no provider: each one is imported when its protocol is first used."""
    code = ("import sys, harness.protocols\n"
            "bad = [m for m in sys.modules if m.startswith(('harness.bench', 'harness.agent', 'harness.accuracy',\n"
            "                                               'strands', 'aiohttp'))]\n"
            "assert not bad, bad\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
