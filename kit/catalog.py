"""The backends as data: the one source of truth read by the CDK stacks and the harness.

Per backend: its stack, service (what bills) and protocol (how the harness speaks to it), the
image family it boots and the instance types it accepts (``Hardware``, ``instance_problem``), its
engine and the engine's settings for an instance type and model (``engine_settings``: vLLM's
tool-call flags, the Neuron platform and tensor-parallel degrees), the default model per weight
precision, whether ``-c model`` applies, its boot-image choices and whether it serves packages.
Nothing outside this module compares against a backend id; stacks, boot scripts and the Neuron
engine receive the decided values.

Plain Python only. The stacks import this module; it must never import aws-cdk-lib, so the
harness (``make run``) works without the CDK installed.

Figures carry their source in a comment. Chip bandwidths are the vendors' peak figures; the
T4G's measured 277 GB/s comes from the seed article (see ``reference`` in the README).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal, Mapping

Service = Literal["bedrock", "sagemaker", "ec2"]
Protocol = Literal["openai", "sagemaker", "bedrock"]
Arch = Literal["x86_64", "arm64"]
# How a chip runs a weight precision: native | emulated | unsupported | widened16 (weights unpacked
# to 16-bit before every matmul) | hw_only (the hardware has it, the compiler does not yet).
PrecisionSupport = Literal["native", "emulated", "unsupported", "widened16", "hw_only"]


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One accelerator chip family and how it treats each weight precision."""

    name: str
    precision: Mapping[str, PrecisionSupport]
    # Slowdown per matmul call of int4 against bf16 where int4 is widened (seed: 27x on NeuronCore-v2).
    int4_slowdown: float | None = None
    memory_type: str = ""
    # Per device (one GPU, or one Neuron chip): decimal GB and GB/s as the datasheet gives them.
    device_memory_gb: float | None = None
    device_bandwidth_gb_s: float | None = None
    source: str = ""


L4 = Chip(name="NVIDIA L4", precision={"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "widened16"},
          memory_type="GDDR6", device_memory_gb=24, device_bandwidth_gb_s=300,
          source="NVIDIA L4 datasheet via docs/BRIEF.md (24 GB, 300 GB/s); GpuInfo SizeInMiB 22888")
A10G = Chip(name="NVIDIA A10G", precision={"bf16": "native", "fp16": "native", "fp8": "unsupported", "int8": "native",
                            "int4": "widened16"},
            memory_type="GDDR6", device_memory_gb=24, device_bandwidth_gb_s=600,
            source="docs/BRIEF.md: 'G5 = A10G (24 GB GDDR6, 600 GB/s)'")
L40S = Chip(name="NVIDIA L40S", precision={"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "widened16"},
            memory_type="GDDR6", device_memory_gb=48, device_bandwidth_gb_s=864,
            source="NVIDIA L40S datasheet via docs/BRIEF.md (48 GB, 864 GB/s); GpuInfo SizeInMiB 45776")
BLACKWELL = Chip(name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                 precision={"bf16": "native", "fp16": "native", "fp8": "native", "int8": "native", "int4": "native"},
                 memory_type="GDDR7", device_memory_gb=96, device_bandwidth_gb_s=1597,
                 source="NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (Dec 2025): '96 GB', "
                        "'1597 GB/s', GDDR7")
T4G = Chip(name="NVIDIA T4G", precision={"bf16": "emulated", "fp16": "native", "fp8": "unsupported", "int8": "native",
                          "int4": "widened16"},
           memory_type="GDDR6", device_memory_gb=16, device_bandwidth_gb_s=320,
           source="seed 000: T4G 16 GB, 320 GB/s (277 measured)")
NEURON_V2 = Chip(
    name="NeuronCore-v2",
    precision={"bf16": "native", "fp16": "native", "fp8": "hw_only", "int8": "native", "int4": "widened16"},
    int4_slowdown=27.0, memory_type="HBM",
    source="seed 000 / BRIEF: 2 NeuronCores x 16 GiB per chip (sized per instance row, in GiB)")

CHIPS: tuple[Chip, ...] = (A10G, L4, L40S, BLACKWELL, T4G, NEURON_V2)


# Instance types the kit knows by heart: the one table of instance facts (GPU or Neuron device
# count, accelerator memory, peak bandwidth, vCPUs for the quota checks). Others may still be used
# (see ``instance_arch``) but the roofline, the planner and the quota checks need an entry here.
# ml.* types are the same hardware as their EC2 twins. Sources, per figure:
#
# - Chip memory and bandwidth: the vendors' datasheets, as the project brief
#   (docs/BRIEF.md, "GPU families") records them: A10G 24 GB GDDR6 600 GB/s, L4 24 GB 300 GB/s,
#   L40S 48 GB 864 GB/s. RTX PRO 6000 Blackwell Server Edition: NVIDIA's datasheet (December 2025,
#   nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition) "96 GB ... 1597 GB/s",
#   GDDR7, as AWS's G7e launch notes repeat it ("GPU あたり 96 GB の GDDR7 メモリ、1597 GB/s の
#   メモリ帯域幅"). The Workstation Edition's 1792 GB/s is another SKU. Seed 001's "HBM3e 8.0 TB/s"
#   for G7 is wrong for this GPU; the catalog carried it as ml.g7e.12xlarge at 8,000 GB/s.
# - GPU memory as the EC2 API reports it (DescribeInstanceTypes ``GpuInfo``), recorded in
#   skypilot-org/skypilot-catalog catalogs/v7/aws/vms.csv @27f67dd4: L4 "SizeInMiB: 22888"
#   (gr6.4xlarge), L40S "SizeInMiB: 45776" (g6e.*). The planner budgets with the datasheet GB
#   (22888 MiB is 24.0 GB) times vLLM's memory fraction.
# - GPUs and vCPUs per size: G6e from the same vms.csv (g6e.xlarge "4.0 vCPUs ... Count: 1",
#   g6e.24xlarge "96.0 ... Count: 4", g6e.48xlarge "192.0 ... Count: 8"); G7e from AWS's table as
#   kubernetes/autoscaler#9854 quotes it ("g7e.2xlarge | 8 | 64 | 1 | 96", "g7e.12xlarge | 48 | 512
#   | 2 | 192", "g7e.24xlarge | 96 | 1024 | 4 | 384", "g7e.48xlarge | 192 | 2048 | 8 | 768") and
#   aws/sagemaker-hyperpod-cli#390 ("ml.g7e.2xlarge": {"cpu": 8, "gpu": 1}); so ml.g7e.12xlarge has
#   2 GPUs and 192 GB, not the 4 and 384 the catalog had. G5 and G6 sizes as the catalog had them
#   (AWS EC2 G5/G6 pages: g5.12xlarge and g6.12xlarge 48 vCPUs, 4 GPUs; the 48xlarge 8 GPUs).
# - Inferentia2: 32 GiB HBM per chip, 2 NeuronCore-v2 per chip (16 GiB each), ~820 GB/s per
#   chip; Trainium: 32 GiB per chip, 2 NeuronCores (seed 000; BRIEF "Neuron limits").
# - Precision support per chip: reference/seed_figures.json ``precision_support`` for L4, T4G and
#   NeuronCore-v2; A10G (Ampere, sm_86) has no FP8 tensor cores; L40S (Ada, sm_89) has FP8 like the
#   L4; Blackwell adds FP4 (seed 001, NVIDIA's datasheet "FP4").


@dataclass(frozen=True, kw_only=True)
class InstanceSpec:
    """What the harness and the stacks need to know about one instance type."""

    name: str
    arch: Arch
    vcpus: int
    chip: Chip
    accelerators: int  # GPUs, or Neuron devices
    accel_memory_gib: float  # total accelerator memory on the instance (datasheet GB for GPUs, GiB for Neuron)
    bandwidth_gb_s: float  # total peak memory bandwidth across its accelerators
    neuron_cores: int = 0
    measured_bandwidth_gb_s: float | None = None
    source: str = ""

    @property
    def family(self) -> str:
        """'ml.g6e.12xlarge' -> 'g6e'."""
        return self.name.removeprefix("ml.").split(".")[0]

    @property
    def memory_bytes_per_device(self) -> float:
        """Bytes of one GPU, or of one NeuronCore (the unit a Neuron shard lives on)."""
        if self.neuron_cores:
            return self.accel_memory_gib * 2**30 / self.neuron_cores
        return self.accel_memory_gib * 1e9 / self.accelerators

    @property
    def bandwidth_per_device_gb_s(self) -> float:
        """Peak bandwidth of one GPU, or one NeuronCore's share of its chip's."""
        return self.bandwidth_gb_s / (self.neuron_cores or self.accelerators)

    @property
    def devices(self) -> int:
        """The units tensor parallelism spreads over: GPUs, or NeuronCores."""
        return self.neuron_cores or self.accelerators


def _gpu(name: str, vcpus: int, chip: Chip, n: int, source: str, arch: Arch = "x86_64",
         measured: float | None = None) -> InstanceSpec:
    return InstanceSpec(name=name, arch=arch, vcpus=vcpus, chip=chip, accelerators=n,
                        accel_memory_gib=chip.device_memory_gb * n, bandwidth_gb_s=chip.device_bandwidth_gb_s * n,
                        measured_bandwidth_gb_s=measured, source=source)


_G5 = "AWS EC2 G5 sizes (catalog); A10G per BRIEF"
_G6 = "AWS EC2 G6 sizes (catalog); L4 datasheet"
_G6E = "skypilot-catalog vms.csv @27f67dd4 (DescribeInstanceTypes GpuInfo)"
_G7E = "kubernetes/autoscaler#9854 (AWS G7e table); sagemaker-hyperpod-cli#390"
_GPU_ROWS = [
    _gpu("g5.xlarge", 4, A10G, 1, _G5), _gpu("g5.2xlarge", 8, A10G, 1, _G5),
    _gpu("g5.12xlarge", 48, A10G, 4, _G5), _gpu("g5.48xlarge", 192, A10G, 8, _G5),
    _gpu("g6.xlarge", 4, L4, 1, _G6), _gpu("g6.2xlarge", 8, L4, 1, _G6),
    _gpu("g6.12xlarge", 48, L4, 4, _G6), _gpu("g6.48xlarge", 192, L4, 8, _G6),
    _gpu("g6e.xlarge", 4, L40S, 1, _G6E), _gpu("g6e.2xlarge", 8, L40S, 1, _G6E),
    _gpu("g6e.12xlarge", 48, L40S, 4, _G6E), _gpu("g6e.48xlarge", 192, L40S, 8, _G6E),
    _gpu("g7e.2xlarge", 8, BLACKWELL, 1, _G7E), _gpu("g7e.12xlarge", 48, BLACKWELL, 2, _G7E),
    _gpu("g7e.24xlarge", 96, BLACKWELL, 4, _G7E), _gpu("g7e.48xlarge", 192, BLACKWELL, 8, _G7E),
]
# GPU families a SageMaker endpoint runs on, twins of the EC2 rows above (same hardware).
SAGEMAKER_FAMILIES = ("g5", "g6", "g6e", "g7e")


def _neuron(name: str, vcpus: int, chips: int, cores: int, gb_s_per_chip: float) -> InstanceSpec:
    return InstanceSpec(name=name, arch="x86_64", vcpus=vcpus, chip=NEURON_V2, accelerators=chips,
                        accel_memory_gib=32 * chips, bandwidth_gb_s=gb_s_per_chip * chips, neuron_cores=cores,
                        source="seed 000 / BRIEF (32 GiB, 2 NeuronCores per chip)")


INSTANCES: dict[str, InstanceSpec] = {
    s.name: s
    for s in [
        *_GPU_ROWS,
        _gpu("g5g.xlarge", 4, T4G, 1, "seed 000", arch="arm64", measured=277),
        _gpu("g5g.2xlarge", 8, T4G, 1, "seed 000", arch="arm64", measured=277),
        _gpu("g5g.4xlarge", 16, T4G, 1, "seed 000", arch="arm64", measured=277),
        # Inferentia2: 32 GiB HBM and ~820 GB/s per chip, 2 NeuronCore-v2 per chip.
        _neuron("inf2.xlarge", 4, 1, 2, 817), _neuron("inf2.8xlarge", 32, 1, 2, 817),
        _neuron("inf2.24xlarge", 96, 6, 12, 817), _neuron("inf2.48xlarge", 192, 12, 24, 817),
        # Trainium1: 32 GiB HBM per chip, 2 NeuronCore-v2 per chip (seed: ~613 GB/s measured class).
        _neuron("trn1.2xlarge", 8, 1, 2, 613), _neuron("trn1.32xlarge", 128, 16, 32, 613),
        _neuron("trn1n.32xlarge", 128, 16, 32, 613),  # trn1.32xlarge + 2x network
    ]
}
for _s in _GPU_ROWS:
    if _s.family in SAGEMAKER_FAMILIES:
        INSTANCES["ml." + _s.name] = replace(_s, name="ml." + _s.name,
                                             source=_s.source + "; SageMaker twin of " + _s.name)


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


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """What instance types a backend may run on: the CPU architecture its image is built for and
    the instance families it accepts (a regex the whole type must match)."""

    arch: Arch
    families: str
    described: str  # how an error message names the families, e.g. "an NVIDIA GPU type"


# The image families (``Backend.image``) and the hardware each accepts. GPU families: any g*/p*
# type of the image's architecture (g5g, c7g... are arm64: see ``instance_arch``).
GPU_X86 = Hardware(arch="x86_64", families=r"[gp].*", described="an NVIDIA GPU type")
GPU_ARM64 = Hardware(arch="arm64", families=r"[gp].*", described="an NVIDIA GPU type")
NEURON = Hardware(arch="x86_64", families=r"(inf2|trn1|trn1n)\..+", described="an inf2/trn1 type")
SAGEMAKER_GPU = Hardware(arch="x86_64", families=r"ml\..+", described="an ml.* SageMaker type")

# Neuron platform (the name the runtime's degree table uses) of each Neuron instance family:
# trn1n is trn1's Trainium chips with twice the network bandwidth (EC2 Trn1 page), so it runs
# trn1's degrees and trn1's compiled graphs.
NEURON_PLATFORMS: dict[str, str] = {"inf2": "inf2", "trn1": "trn1", "trn1n": "trn1"}
# NxD Inference tensor-parallel degrees the Neuron runtime supports per platform (aws-neuron/
# aws-neuron-sdk libraries/nxd-inference/api-guides/api-guide.rst at v2.28.1, the default line's
# guide: "inf2: 1, 2, 4, 8, and 24", "trn1: 1, 2, 8, 16, and 32"); the engine serves the largest of them that fits the instance's
# NeuronCores and divides the model's attention heads (ami/neuron/neuron_config.py).
NEURON_TP_DEGREES: dict[str, tuple[int, ...]] = {"inf2": (1, 2, 4, 8, 24), "trn1": (1, 2, 8, 16, 32)}

# Tool-call parser per model family (vLLM's --tool-call-parser), read by every vLLM backend (the
# EC2 servers and the SageMaker container). A model not listed gets no tool flags rather than a
# parser that would mangle its output; the harness then skips the agent trial.
TOOL_CALL_PARSERS: tuple[tuple[str, str], ...] = (
    ("gemma-4", "gemma4"),
    ("qwen3-coder", "qwen3_coder"),
    ("qwen3", "hermes"),
)


def tool_call_parser(model_id: str) -> str | None:
    name = model_id.lower()
    return next((parser for key, parser in TOOL_CALL_PARSERS if key in name), None)


def vllm_tool_flags(model_id: str) -> str:
    """Command-line flags for `vllm serve` (empty when the model has no known parser); the
    seed's g6 run served Gemma 4 with --enable-auto-tool-choice --tool-call-parser gemma4."""
    parser = tool_call_parser(model_id)
    return f"--enable-auto-tool-choice --tool-call-parser {parser}" if parser else ""


def neuron_platform(instance_type: str) -> str | None:
    """'inf2.xlarge' -> 'inf2', 'trn1n.32xlarge' -> 'trn1'; None for a non-Neuron type."""
    return NEURON_PLATFORMS.get(instance_type.split(".")[0])


def neuron_tp_degrees(instance_type: str) -> tuple[int, ...]:
    """Tensor-parallel degrees the Neuron runtime supports on this instance type: its platform's
    degrees up to its NeuronCore count. ValueError (one line) when the catalog lacks its count."""
    spec = INSTANCES.get(instance_type)
    platform = neuron_platform(instance_type)
    if spec is None or not spec.neuron_cores or platform is None:
        known = ", ".join(n for n, s in INSTANCES.items() if s.neuron_cores)
        raise ValueError(f"the catalog (kit/catalog.py) has no NeuronCore count for it; known: {known}")
    return tuple(d for d in NEURON_TP_DEGREES[platform] if d <= spec.neuron_cores)


EngineKind = Literal["managed", "vllm", "neuron"]


@dataclass(frozen=True)
class EngineSettings:
    """What a backend's engine is started with, decided here for one instance type and model.
    The stacks hand these to the boot scripts and containers as they are."""

    vllm_args: str | None = None  # vLLM: extra `vllm serve` flags (tool calling)
    tool_call_parser: str | None = None  # vLLM: --tool-call-parser, None = no tool flags
    neuron_platform: str | None = None  # Neuron: platform the graphs are compiled for
    tp_degrees: tuple[int, ...] = ()  # Neuron: degrees the runtime supports on the instance


@dataclass(frozen=True, kw_only=True)
class Backend:
    id: str
    stack_name: str
    label: str
    service: Service  # what bills: bedrock | sagemaker | ec2
    protocol: Protocol  # how the harness speaks to it: openai | sagemaker | bedrock
    engine_kind: EngineKind
    engine: str  # the engine, in words
    model_id: str  # default model served (HF id, or the Bedrock model / inference profile id)
    precision: str  # default weight precision
    tool_calls: bool  # does the backend's engine turn model output into OpenAI tool_calls
    instance_type: str | None = None
    port: int | None = None  # model server port on the instance (bound to 127.0.0.1)
    # Which image family the instance boots (gpu-x86, gpu-arm64, neuron; kit/image_families.py)
    # and the instance types it accepts.
    image: str | None = None
    hardware: Hardware | None = None
    # Does ``-c model=...`` (an open-weights model for every self-hosted backend) apply to it.
    open_weights: bool = True
    # Boot-image choices (``-c <id>_image=...``), the first the default: word -> what it does.
    image_choices: tuple[tuple[str, str], ...] = ()
    color: str | None = None  # the report's plot colour for this backend
    # Its engine loads the kit's compressed-tensors int4 packages (harness/package, stacks/package.py):
    # vLLM on x86 NVIDIA GPUs does; the sm_75 build and the Neuron engine do not.
    loads_packages: bool = False
    # EC2 backends: the address blocks of its subnets in the kit's VPC, declared here and never
    # derived from the row's position (kit/subnets.py): the third octet of the first /24 of each
    # block of 8, the first for the backend's own stack, one more per variant slot (kit/variants.py).
    # A new row takes free blocks (kit/subnets.py free_blocks); existing rows never move.
    subnet_blocks: tuple[int, ...] = ()

    def instance_problem(self, instance_type: str) -> str | None:
        """Why this backend cannot run on ``instance_type``, None when it can. The text follows
        ``key='value'`` in a one-line error: it starts with ": " or " "."""
        sagemaker = self.service == "sagemaker"
        if sagemaker != instance_type.startswith("ml."):
            want = "an ml.* SageMaker type" if sagemaker else "an EC2 type without ml."
            return f": {self.id} needs {want}, e.g. {self.instance_type}"
        try:
            arch = instance_arch(instance_type)
        except ValueError:
            return f" is not an instance type (e.g. {self.instance_type})"
        if sagemaker and not (instance_type in INSTANCES and INSTANCES[instance_type].accelerators):
            known = ", ".join(k for k in INSTANCES if k.startswith("ml."))
            return f": has no GPU count in the catalog; known: {known} (add it to kit/catalog.py)"
        hw = self.hardware
        if hw is None:
            return None
        if arch != hw.arch:
            return (f" is {arch} but the {self.id} image is {hw.arch}; "
                    f"use a {hw.arch} type such as {self.instance_type}")
        if not re.fullmatch(hw.families, instance_type):
            return f": {self.id} needs {hw.described}, e.g. {self.instance_type}"
        if self.engine_kind == "neuron":
            try:
                neuron_tp_degrees(instance_type)
            except ValueError as e:
                return f": {e}"
        return None

    def engine_settings(self, instance_type: str | None, model_id: str) -> EngineSettings:
        """The engine's settings on ``instance_type`` serving ``model_id``."""
        if self.engine_kind == "vllm":
            return EngineSettings(vllm_args=vllm_tool_flags(model_id), tool_call_parser=tool_call_parser(model_id))
        if self.engine_kind == "neuron" and instance_type:
            return EngineSettings(neuron_platform=neuron_platform(instance_type),
                                  tp_degrees=neuron_tp_degrees(instance_type))
        return EngineSettings()


GEMMA_E2B = "google/gemma-4-E2B-it"
# QAT int4 weights (compressed-tensors w4a16), what the seed's g6 and SageMaker served.
GEMMA_E2B_INT4 = "google/gemma-4-E2B-it-qat-w4a16-ct"
NOVA_MICRO = "us.amazon.nova-micro-v1:0"
# The open-weights model each self-hosted backend serves by default, per weight precision.
DEFAULT_MODEL: dict[str, str] = {"int4": GEMMA_E2B_INT4, "bf16": GEMMA_E2B, "fp16": GEMMA_E2B}

BACKENDS: dict[str, Backend] = {
    b.id: b
    for b in [
        Backend(id="bedrock", stack_name="BedrockStack", label="Amazon Bedrock", service="bedrock",
                protocol="bedrock", engine_kind="managed", engine="managed API", model_id=NOVA_MICRO,
                precision="undisclosed", tool_calls=True, open_weights=False, color="#ff9900"),
        Backend(id="sagemaker", stack_name="SageMakerStack", label="SageMaker endpoint (vLLM, L4)",
                service="sagemaker", protocol="sagemaker", engine_kind="vllm", engine="AWS vLLM container",
                model_id=DEFAULT_MODEL["int4"], precision="int4", tool_calls=True, instance_type="ml.g6.xlarge",
                port=8080, hardware=SAGEMAKER_GPU, color="#1f77b4", loads_packages=True),
        Backend(id="g6", stack_name="G6Stack", label="vLLM on EC2 g6 (L4)", service="ec2", protocol="openai",
                engine_kind="vllm", engine="vLLM", model_id=DEFAULT_MODEL["int4"], precision="int4",
                tool_calls=True, instance_type="g6.xlarge", port=8000, image="gpu-x86", hardware=GPU_X86,
                color="#2ca02c", loads_packages=True,
                image_choices=(("dlami", "install vLLM at boot"),
                               ("prebuilt", "the vllm-cuda image pipeline's AMI")),
                subnet_blocks=(64, 160, 168, 176)),
        Backend(id="g5g", stack_name="G5gStack", label="vLLM on EC2 g5g (Graviton2 + T4G)", service="ec2",
                protocol="openai", engine_kind="vllm",
                engine="vLLM built from source for sm_75, shared-memory patch", model_id=DEFAULT_MODEL["fp16"],
                precision="fp16", tool_calls=True, instance_type="g5g.2xlarge", port=8000, image="gpu-arm64",
                hardware=GPU_ARM64, color="#9467bd", subnet_blocks=(72, 184, 192, 200)),
        Backend(id="inf2", stack_name="Inf2Stack", label="Neuron engine on EC2 inf2 (Inferentia2)", service="ec2",
                protocol="openai", engine_kind="neuron", engine="kit Neuron engine (ami/neuron)",
                model_id=DEFAULT_MODEL["bf16"], precision="bf16", tool_calls=True, instance_type="inf2.xlarge",
                port=8000, image="neuron", hardware=NEURON, color="#d62728", subnet_blocks=(80, 208, 216, 224)),
        Backend(id="trn1", stack_name="Trn1Stack", label="Neuron engine on EC2 trn1 (Trainium)", service="ec2",
                protocol="openai", engine_kind="neuron", engine="kit Neuron engine (ami/neuron)",
                model_id=DEFAULT_MODEL["bf16"], precision="bf16", tool_calls=True, instance_type="trn1.2xlarge",
                port=8000, image="neuron", hardware=NEURON, color="#8c564b", subnet_blocks=(88, 232, 240, 248)),
    ]
}

BACKEND_IDS: tuple[str, ...] = tuple(BACKENDS)


def backend(backend_id: str) -> Backend:
    try:
        return BACKENDS[backend_id]
    except KeyError:
        raise ValueError(f"unknown backend {backend_id!r}; valid: {', '.join(BACKEND_IDS)}") from None
