"""The six backends as data: the one source of truth read by the CDK stacks and the harness.

Plain Python only. The stacks import this module; it must never import aws-cdk-lib, so the
harness (``make run``) works without the CDK installed.

Figures carry their source in a comment. Chip bandwidths are the vendors' peak figures; the
T4G's measured 277 GB/s comes from the seed article (see ``reference`` in the README).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

Service = Literal["bedrock", "sagemaker", "ec2"]
Arch = Literal["x86_64", "arm64"]
# How a chip runs a weight precision: native | emulated | unsupported | widened16 (weights unpacked
# to 16-bit before every matmul) | hw_only (the hardware has it, the compiler does not yet).
PrecisionSupport = Literal["native", "emulated", "unsupported", "widened16", "hw_only"]


@dataclass(frozen=True)
class Chip:
    """One accelerator chip family and how it treats each weight precision."""

    name: str
    precision: Mapping[str, PrecisionSupport]
    # Slowdown per matmul call of int4 against bf16 where int4 is widened (seed: 27x on NeuronCore-v2).
    int4_slowdown: float | None = None


L4 = Chip("NVIDIA L4", {"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "widened16"})
A10G = Chip("NVIDIA A10G", {"bf16": "native", "fp16": "native", "fp8": "unsupported", "int8": "native", "int4": "widened16"})
L40S = Chip("NVIDIA L40S", {"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "widened16"})
BLACKWELL = Chip("NVIDIA RTX PRO 6000 Blackwell", {"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "native"})
T4G = Chip("NVIDIA T4G", {"bf16": "emulated", "fp16": "native", "fp8": "unsupported", "int8": "native", "int4": "widened16"})
NEURON_V2 = Chip(
    "NeuronCore-v2",
    {"bf16": "native", "fp16": "native", "fp8": "hw_only", "int8": "native", "int4": "widened16"},
    int4_slowdown=27.0,
)
NOVA = Chip("Nova Micro (managed)", {})


@dataclass(frozen=True)
class InstanceSpec:
    """What the harness and the stacks need to know about one instance type."""

    name: str
    arch: Arch
    vcpus: int
    chip: Chip
    accelerators: int  # GPUs, or Neuron devices
    accel_memory_gib: float  # total accelerator memory on the instance
    bandwidth_gb_s: float  # total peak memory bandwidth across its accelerators
    neuron_cores: int = 0
    measured_bandwidth_gb_s: float | None = None

    @property
    def bandwidth_per_accel_gb_s(self) -> float:
        return self.bandwidth_gb_s / max(self.accelerators, 1)


def _i(name, arch, vcpus, chip, n, mem, bw, cores=0, measured=None) -> InstanceSpec:
    return InstanceSpec(name, arch, vcpus, chip, n, mem, bw, cores, measured)


# Instance types the kit knows by heart. Others may still be used (see ``instance_arch``) but the
# roofline and quota checks need an entry here. ml.* types mirror their EC2 twins.
INSTANCES: dict[str, InstanceSpec] = {
    s.name: s
    for s in [
        _i("g6.xlarge", "x86_64", 4, L4, 1, 24, 300),
        _i("g6.2xlarge", "x86_64", 8, L4, 1, 24, 300),
        _i("g6.12xlarge", "x86_64", 48, L4, 4, 96, 1200),
        _i("g5.xlarge", "x86_64", 4, A10G, 1, 24, 600),
        _i("g5.12xlarge", "x86_64", 48, A10G, 4, 96, 2400),
        _i("g6e.xlarge", "x86_64", 4, L40S, 1, 48, 864),
        _i("g6e.12xlarge", "x86_64", 48, L40S, 4, 192, 3456),
        _i("g5g.xlarge", "arm64", 4, T4G, 1, 16, 320, measured=277),
        _i("g5g.2xlarge", "arm64", 8, T4G, 1, 16, 320, measured=277),
        _i("g5g.4xlarge", "arm64", 16, T4G, 1, 16, 320, measured=277),
        # Inferentia2: 32 GiB HBM and ~820 GB/s per chip, 2 NeuronCore-v2 per chip.
        _i("inf2.xlarge", "x86_64", 4, NEURON_V2, 1, 32, 817, cores=2),
        _i("inf2.8xlarge", "x86_64", 32, NEURON_V2, 1, 32, 817, cores=2),
        _i("inf2.24xlarge", "x86_64", 96, NEURON_V2, 6, 192, 4902, cores=12),
        _i("inf2.48xlarge", "x86_64", 192, NEURON_V2, 12, 384, 9804, cores=24),
        # Trainium1: 32 GiB HBM per chip, 2 NeuronCore-v2 per chip (seed: ~613 GB/s measured class).
        _i("trn1.2xlarge", "x86_64", 8, NEURON_V2, 1, 32, 613, cores=2),
        _i("trn1.32xlarge", "x86_64", 128, NEURON_V2, 16, 512, 9808, cores=32),
        _i("trn1n.32xlarge", "x86_64", 128, NEURON_V2, 16, 512, 9808, cores=32),  # trn1.32xlarge + 2x network
    ]
}
for _name in ["g6.xlarge", "g6.2xlarge", "g6.12xlarge", "g5.xlarge", "g5.12xlarge", "g6e.xlarge", "g6e.12xlarge"]:
    _s = INSTANCES[_name]
    INSTANCES["ml." + _name] = InstanceSpec("ml." + _name, _s.arch, _s.vcpus, _s.chip, _s.accelerators,
                                            _s.accel_memory_gib, _s.bandwidth_gb_s)
INSTANCES["ml.g7e.12xlarge"] = _i("ml.g7e.12xlarge", "x86_64", 48, BLACKWELL, 4, 384, 8000)

_FAMILY = re.compile(r"^(?:ml\.)?([a-z]+)(\d+)([a-z-]*)\.([a-z0-9]+)$")


def instance_arch(instance_type: str) -> Arch:
    """CPU architecture of an EC2/SageMaker instance type; Graviton families carry a 'g' suffix.

    g5g, c7g, m7gd, c7gn are arm64; g6, g6e, inf2, trn1, m7i are x86_64. Raises ValueError on a
    string that is not shaped like an instance type.
    """
    if instance_type in INSTANCES:
        return INSTANCES[instance_type].arch
    m = _FAMILY.match(instance_type)
    if not m:
        raise ValueError(f"not an instance type: {instance_type!r} (expected e.g. g6.xlarge)")
    prefix, _gen, attrs, _size = m.groups()
    # 'g' as a family attribute (after the generation digit) means Graviton.
    return "arm64" if "g" in attrs else "x86_64"


@dataclass(frozen=True)
class Backend:
    id: str
    stack_name: str
    label: str
    service: Service
    engine: str
    model_id: str  # default model served (HF id, or the Bedrock model / inference profile id)
    precision: str  # default weight precision
    tool_calls: bool  # does the backend's engine turn model output into OpenAI tool_calls
    instance_type: str | None = None
    port: int | None = None  # model server port on the instance (bound to 127.0.0.1)
    # Which public image family the instance boots: gpu-x86, gpu-arm64, neuron.
    image: str | None = None
    seed_tool_calls: bool | None = None  # what the seed article saw, where it differs
    notes: tuple[str, ...] = field(default=())

    @property
    def spec(self) -> InstanceSpec | None:
        return INSTANCES.get(self.instance_type) if self.instance_type else None

    @property
    def arch(self) -> Arch | None:
        return instance_arch(self.instance_type) if self.instance_type else None

    @property
    def is_ec2(self) -> bool:
        return self.service == "ec2"


GEMMA_E2B = "google/gemma-4-E2B-it"
# QAT int4 weights (compressed-tensors w4a16), what the seed's g6 and SageMaker served.
GEMMA_E2B_INT4 = "google/gemma-4-E2B-it-qat-w4a16-ct"
NOVA_MICRO = "us.amazon.nova-micro-v1:0"

BACKENDS: dict[str, Backend] = {
    b.id: b
    for b in [
        Backend("bedrock", "BedrockStack", "Amazon Bedrock", "bedrock", "managed API", NOVA_MICRO,
                "undisclosed", tool_calls=True),
        Backend("sagemaker", "SageMakerStack", "SageMaker endpoint (vLLM, L4)", "sagemaker",
                "AWS vLLM container", GEMMA_E2B_INT4, "int4", tool_calls=True,
                instance_type="ml.g6.xlarge", port=8080),
        Backend("g6", "G6Stack", "vLLM on EC2 g6 (L4)", "ec2", "vLLM", GEMMA_E2B_INT4, "int4",
                tool_calls=True, instance_type="g6.xlarge", port=8000, image="gpu-x86"),
        Backend("g5g", "G5gStack", "vLLM on EC2 g5g (Graviton2 + T4G)", "ec2",
                "vLLM built from source for sm_75, shared-memory patch", GEMMA_E2B, "fp16",
                tool_calls=True, instance_type="g5g.2xlarge", port=8000, image="gpu-arm64"),
        Backend("inf2", "Inf2Stack", "Neuron engine on EC2 inf2 (Inferentia2)", "ec2",
                "kit Neuron engine (ami/neuron)", GEMMA_E2B, "bf16", tool_calls=True,
                instance_type="inf2.xlarge", port=8000, image="neuron", seed_tool_calls=False),
        Backend("trn1", "Trn1Stack", "Neuron engine on EC2 trn1 (Trainium)", "ec2",
                "kit Neuron engine (ami/neuron)", GEMMA_E2B, "bf16", tool_calls=True,
                instance_type="trn1.2xlarge", port=8000, image="neuron", seed_tool_calls=False),
    ]
}

BACKEND_IDS: tuple[str, ...] = tuple(BACKENDS)
# Image family -> CPU architecture the image is built for.
IMAGE_ARCH: dict[str, Arch] = {"gpu-x86": "x86_64", "gpu-arm64": "arm64", "neuron": "x86_64"}


def backend(backend_id: str) -> Backend:
    try:
        return BACKENDS[backend_id]
    except KeyError:
        raise ValueError(f"unknown backend {backend_id!r}; valid: {', '.join(BACKEND_IDS)}") from None
