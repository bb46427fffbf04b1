"""The catalog's backend facts (kit/catalog.py): instance rules, engine settings, Neuron
platform and tensor-parallel degrees. Expected values come from the sources the catalog cites
(NxD Inference API guide for the degrees, the EC2 instance pages for the NeuronCore counts), not
from the catalog's own tables."""
from __future__ import annotations

from typing import get_args

import pytest

from kit.catalog import BACKENDS, Protocol, Service, instance_arch, neuron_platform, neuron_tp_degrees


@pytest.mark.parametrize("instance_type, degrees", [
    ("inf2.xlarge", (1, 2)),                  # 2 NeuronCores
    ("inf2.24xlarge", (1, 2, 4, 8)),          # 12 NeuronCores: inf2 has no 12
    ("inf2.48xlarge", (1, 2, 4, 8, 24)),      # 24
    ("trn1.2xlarge", (1, 2)),                 # 2
    ("trn1.32xlarge", (1, 2, 8, 16, 32)),     # 32
    ("trn1n.32xlarge", (1, 2, 8, 16, 32)),    # trn1n: trn1's chips, trn1's degrees
])
def test_neuron_tp_degrees_per_instance(instance_type, degrees):
    assert neuron_tp_degrees(instance_type) == degrees


@pytest.mark.parametrize("instance_type, platform", [
    ("inf2.xlarge", "inf2"), ("trn1.2xlarge", "trn1"), ("trn1n.32xlarge", "trn1"), ("g6.xlarge", None)])
def test_neuron_platform_is_one_rule_for_every_family(instance_type, platform):
    assert neuron_platform(instance_type) == platform


def test_unknown_neuron_size_names_the_known_ones():
    with pytest.raises(ValueError, match=r"no NeuronCore count.*known: inf2\.xlarge"):
        neuron_tp_degrees("inf2.2xlarge")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_default_instance_type_is_accepted_by_its_backend(backend):
    b = BACKENDS[backend]
    if b.instance_type:
        assert b.instance_problem(b.instance_type) is None
        assert instance_arch(b.instance_type) == b.hardware.arch


@pytest.mark.parametrize("backend, instance_type, phrase", [
    ("g6", "inf2.xlarge", ": g6 needs an NVIDIA GPU type, e.g. g6.xlarge"),
    ("g5g", "g6.xlarge", " is x86_64 but the g5g image is arm64"),
    ("inf2", "g6.xlarge", ": inf2 needs an inf2/trn1 type, e.g. inf2.xlarge"),
    ("trn1", "trn1n.32xlarge", None),
    ("sagemaker", "g6.xlarge", ": sagemaker needs an ml.* SageMaker type"),
    ("sagemaker", "ml.p5.48xlarge", ": has no GPU count in the catalog"),
    ("g6", "ml.g6.xlarge", ": g6 needs an EC2 type without ml."),
    ("g6", "nonsense", " is not an instance type"),
])
def test_instance_rules(backend, instance_type, phrase):
    problem = BACKENDS[backend].instance_problem(instance_type)
    assert problem is None if phrase is None else problem.startswith(phrase), problem


def test_engine_settings_per_engine():
    g6 = BACKENDS["g6"].engine_settings("g6.xlarge", "google/gemma-4-E2B-it")
    assert g6.vllm_args == "--enable-auto-tool-choice --tool-call-parser gemma4" and not g6.tp_degrees
    assert BACKENDS["g5g"].engine_settings("g5g.2xlarge", "mistralai/Other-7B").vllm_args == ""
    trn = BACKENDS["trn1"].engine_settings("trn1n.32xlarge", "google/gemma-4-E2B-it")
    assert (trn.neuron_platform, trn.tp_degrees, trn.vllm_args) == ("trn1", (1, 2, 8, 16, 32), None)
    assert BACKENDS["bedrock"].engine_settings(None, "us.amazon.nova-micro-v1:0") == \
        type(g6)()  # a managed API has no engine settings


def test_protocol_and_service_are_separate_words():
    # what bills -> how the harness speaks to it: every EC2 engine serves the OpenAI API
    speaks = {"bedrock": "bedrock", "sagemaker": "sagemaker", "ec2": "openai"}
    for b in BACKENDS.values():
        assert b.service in get_args(Service) and b.protocol in get_args(Protocol), b.id
        assert b.protocol == speaks[b.service], b.id


def test_only_vllm_on_x86_nvidia_loads_packages():
    """compressed-tensors int4 needs vLLM's x86 CUDA kernels: not the sm_75 build, not Neuron."""
    for b in BACKENDS.values():
        assert b.loads_packages == (b.engine_kind == "vllm" and b.hardware.arch == "x86_64"), b.id
    assert {b.id for b in BACKENDS.values() if b.loads_packages} >= {"sagemaker", "g6"}  # the seed's int4 pair
