"""Versions the image pipelines install, in one place.

Plain Python (no aws-cdk-lib): the CDK stacks pass these to the component documents as
Image Builder component parameters, and the patch check (ami/check_patch.py) reads them too.
Where a pin comes from is said next to it; tests/stacks/test_images_patch.py checks the ones
that can be checked against the vLLM source distribution.
"""
from __future__ import annotations

from dataclasses import dataclass

# vLLM: the seed served Gemma 4 E2B with vLLM 0.30 on the g6 and built 0.27.2rc0 by hand for
# the g5g. 0.30.0 has the Gemma 4 attention-backend selection (Gemma4Config forces TRITON_ATTN
# when FlashAttention 4 is missing, as on Turing) and is what ami/patches/ is written against.
VLLM_VERSION = "0.30.0"
# sha256 of vllm-0.30.0.tar.gz as PyPI lists it; the build re-checks it before unpacking.
VLLM_SDIST_SHA256 = "5f8f4e890c042ffa1c3e103f81c35e2d96f60a0a175ac43a4adbae7006bef62b"
# The torch vLLM 0.30.0 pins in requirements/cuda.txt and pyproject.toml (checked by a test).
TORCH_VERSION = "2.13.0"
# The Turing shared-memory patch for head_dim-512 attention, applied to the vLLM sdist.
SM75_PATCH = "vllm-0.30.0-turing-smem-head512.patch"
# Only Turing: PyTorch's aarch64 CUDA wheels carry no sm_75 kernels, so both are built here.
SM75_ARCH_LIST = "7.5"
# CUDA toolkit on the arm64 GPU DLAMI (Ubuntu 22.04 lists 12.8, 12.9, 13.0, 13.2); torch 2.13
# and vLLM 0.30.0 build against CUDA 13, which still targets sm_75 (13.0 dropped only < 7.5).
SM75_CUDA_HOME = "/usr/local/cuda-13.0"
PYTHON_VERSION = "3.12"
UV_VERSION = "0.13.9"

# Neuron SDK lines the kit can build (one image and one SSM parameter each, side by side):
# NEURON_DEFAULT_LINE unless `-c neuron_sdk=<line>`. Why 2.28 is the default, and what upstream says
# about every line: kit/neuron_facts.py (the recorded facts, each with its source; a test fails
# if the default is a line whose NxD Inference does not support inf2 and trn1).
# Versions: the release content, src/helperscripts/n2-manifest.json of aws-neuron/aws-neuron-sdk
# (inf2 packages; tag v2.31.1, commit c19b2e69, lists every release from 2.28.0 to 2.31.1).


@dataclass(frozen=True)
class NeuronLine:
    line: str  # "2.28": what `-c neuron_sdk=` takes
    sdk: str  # the release whose package set is pinned
    pip: dict[str, str]  # Neuron Python packages (Neuron pip repository)
    apt: dict[str, str]  # Neuron driver and runtime packages (Neuron apt repository), held
    torch: str  # the PyTorch release torch-neuronx runs on (CPU wheel)
    # torchvision of that PyTorch release, also the CPU build. NxD Inference requires torchvision
    # (unpinned, setup.py at cd3abf3); from PyPI it is the CUDA build, which cannot load next to
    # the CPU torch, and transformers then fails on import (below, above ENGINE_TRANSFORMERS).
    torchvision: str
    # transformers and the huggingface_hub/tokenizers that go with it: NxD Inference's own
    # transformers==4.57.* (its setup.py at 0.8 and 0.9; 2.31 release content) on every line, so
    # one resolver call installs the Neuron packages and the engine with no override
    # (kit/neuron_facts.py TRANSFORMERS_CHOICE says why 4.57.6 and not 5.x).
    engine_pip: tuple[str, ...]
    # Where the build starts: the DLAMI released with this SDK. Either an AMI name (resolved in the
    # deploying account at deploy time, stacks/images.py) or a public SSM parameter.
    parent_ami_name: str | None
    parent_parameter: str | None
    image: str  # the image's name in kit/image_facts.py (pipeline, stack, SSM parameter)
    status: str  # one line for the docs, the image description and the stack description


# Why the image installs torchvision from PyTorch's CPU index with torch, before the Neuron packages:
# - torchvision 0.24.0 is the release for torch 2.9.0 (its PyPI METADATA: "Requires-Dist: torch
#   (==2.9.0)").
# - PyPI's x86_64 wheel of it is the CUDA build (torchvision/version.py: "__version__ = '0.24.0+cu128'");
#   its _C.so needs libc10_cuda.so, libtorch_cuda.so and libcudart.so.12 (readelf -d), which the CPU
#   torch does not ship. torchvision/extension.py then loads no ops, and _meta_registrations.py's
#   module-level `@torch.library.register_fake("torchvision::nms")` raises "RuntimeError: operator
#   torchvision::nms does not exist" on `import torchvision` (read from the PyPI wheel
#   torchvision-0.24.0-cp312-cp312-manylinux_2_28_x86_64.whl).
# - transformers 4.57.6 imports torchvision whenever it is installed and Pillow is (NxD Inference
#   requires both): image_utils.py `if is_torchvision_available(): from torchvision.transforms import
#   InterpolationMode`, reached from modeling_utils -> loss_for_object_detection -> image_transforms,
#   i.e. from every PreTrainedModel import, NxD Inference's hf_adapter and the Gemma 4 port included.
# Upstream's own set (the Neuron DLC, aws-neuron/deep-learning-containers 033cc6a, pytorch/inference/
# 2.9.0/Dockerfile.neuronx) takes torch and torchvision both from PyPI, both CUDA builds, so they match.
ENGINE_TRANSFORMERS = ("transformers==4.57.6", "huggingface_hub==0.36.2", "tokenizers==0.22.2")

NEURON_LINES: dict[str, NeuronLine] = {
    # 2.28.1 = 2.28.0 plus a driver fix for Linux 6.18: aws-neuronx-dkms 2.26.10.0 ("Compatibility
    # fixes for Linux kernel 6.18", aws-neuron-sdk v2.28.1 release-notes/components/runtime.rst
    # l.72-79; n2-manifest.json at v2.31.1 l.252-254 lists it for 2.28.1, l.286-288 2.26.5.0 for
    # 2.28.0). The parent DLAMI does not carry it: the 20260227 DLAMI is the one released with 2.28.0
    # (release-notes/components/dlamis.rst at v2.31.1 l.96-101, "Date of Release: 02/26/2026") and
    # no DLAMI was released for 2.28.1 (the next entry is 2.29.0), so it ships 2.28.0's driver,
    # 2.26.5.0. The image installs 2.26.10.0 and holds it with the kernel (neuron-engine.yaml,
    # PinNeuronRuntime; KERNEL_HOLD below). Every other package is the same in 2.28.0 and 2.28.1.
    "2.28": NeuronLine(
        line="2.28", sdk="2.28.1",
        pip={
            "torch-neuronx": "2.9.0.2.12.22436",
            "neuronx-cc": "2.23.6484.0",
            "libneuronxla": "2.2.15515.0",
            "neuronx-distributed": "0.17.26814",
            "neuronx-distributed-inference": "0.8.16251",
        },
        apt={
            "aws-neuronx-dkms": "2.26.10.0",
            "aws-neuronx-runtime-lib": "2.30.51.0",
            "aws-neuronx-collectives": "2.30.59.0",
            "aws-neuronx-tools": "2.28.23.0",
        },
        torch="2.9.0", torchvision="0.24.0", engine_pip=ENGINE_TRANSFORMERS,
        # No SSM parameter names an SDK version ("Currently, SSM parameters support finding the
        # latest DLAMI ID for each DLAMI type", aws-neuron-sdk deploy/environments/dlami.rst at
        # v2.31.1). The name of the SDK 2.28 DLAMI, as the Gemma 4 31B port ran it:
        # "Neuron SDK 2.28+ (DLAMI: `Deep Learning AMI Neuron (Ubuntu 24.04) 20260227`)"
        # (aws-neuron/neuronx-distributed-inference refs/pull/106/head history, commit ac8934a,
        # contrib/models/gemma-4-31b-it/README.md; 7593d9c: "Also works on SDK 2.28 (DLAMI 20260227)").
        parent_ami_name="Deep Learning AMI Neuron (Ubuntu 24.04) 20260227", parent_parameter=None,
        image="neuron",
        status="NxD Inference 0.8: the last line upstream supports on inf2 and trn1 (default)",
    ),
    "2.31": NeuronLine(
        line="2.31", sdk="2.31.0",
        pip={
            "torch-neuronx": "2.9.0.2.15.32035",
            "neuronx-cc": "2.26.6360.0",
            # 2.31 lists libneuronxla 2.2.17544.0 and 3.0.3854.0; the 2.2 line is the one
            # torch-neuronx 2.9 has used since SDK 2.28 (2.2.15515.0 there), 3.0 arrived with torch-xla 2.10+.
            "libneuronxla": "2.2.17544.0",
            "neuronx-distributed": "0.19.28492",
            "neuronx-distributed-inference": "0.10.18399",
        },
        apt={
            "aws-neuronx-dkms": "2.29.0.0",  # 2.31.0's driver (n2-manifest.json at v2.31.1 l.132-134)
            "aws-neuronx-runtime-lib": "2.33.10.0",
            "aws-neuronx-collectives": "2.33.10.0",
            "aws-neuronx-tools": "2.31.13.0",
        },
        torch="2.9.0", torchvision="0.24.0", engine_pip=ENGINE_TRANSFORMERS,
        # The PyTorch 2.9 DLAMI family's parameter, whose last DLAMI is the SDK 2.31 one (SDK 2.32
        # stopped publishing that family: Neuron DLAMI release notes 2.32.0).
        parent_ami_name=None, parent_parameter="/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id",
        image="neuron-sdk231",
        status="NxD Inference 0.10: not supported upstream on inf2/trn1; for trying",
    ),
}
NEURON_DEFAULT_LINE = "2.28"


def neuron_line(line: str | None = None) -> NeuronLine:
    """The pins of one Neuron SDK line (the default one when ``line`` is None)."""
    try:
        return NEURON_LINES[line or NEURON_DEFAULT_LINE]
    except KeyError:
        raise ValueError(f"neuron_sdk={line!r} is not a Neuron SDK line the kit builds; valid: "
                         f"{', '.join(NEURON_LINES)}") from None


# The default line's pins under their older names (tests and docs read these).
NEURON_SDK = neuron_line().sdk
NEURON_PIP = neuron_line().pip
NEURON_APT = neuron_line().apt
# The kernel packages the Neuron image holds at the kernel its driver was built for (dpkg-query
# patterns, matched against what is installed; neuron-engine.yaml KernelHold): the AWS flavour's
# image, modules and headers of each installed kernel and the meta packages (linux-aws,
# linux-image-aws, linux-headers-aws) that would pull a newer one. Ubuntu's AWS kernels carry the
# flavour in every package name (linux-image-<version>-aws); the running kernel's own
# linux-image-$(uname -r) is held whatever its name.
KERNEL_HOLD = ("linux-*aws*",)
# Where aws-neuronx-tools installs neuron-ls and neuron-top: not on the default PATH (systemd's
# /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, which cloud-init's scripts, the
# kit's units and the Image Builder agent get). aws-neuron/aws-neuron-sdk issue #447: "neuron-ls:
# command not found", answered with `export PATH=/opt/aws/neuron/bin:$PATH` from the install guide.
# userdata/engine-neuron.sh and ami/components/neuron-engine.yaml call the tools by this path.
NEURON_TOOLS_BIN = "/opt/aws/neuron/bin"
# Package indexes of the Neuron image's installer (ami/components/neuron-engine.yaml): PyTorch's
# CPU wheels (PyPI's torch pulls ~3 GB of CUDA libraries) and the Neuron pip repository.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NEURON_PIP_INDEX = "https://pip.repos.neuron.amazonaws.com"
# NxD Inference's Gemma 4 E2B port lives in its contrib tree, not in the wheel; the engine
# loads it from /opt/ami/nxdi-gemma4/src. Commit 6aa6121 of pull request #115 ("Fix v_norm,
# layer_scalar baking, and VLM config for SDK 2.30"), validated by its author on Trn2 only, TP=1.
NXDI_REPO = "https://github.com/aws-neuron/neuronx-distributed-inference.git"
NXDI_COMMIT = "6aa61216f7f57d7107f74cc897b19cc5f14f9a1e"
# The only ref reaching NXDI_COMMIT (observed in a snapshot of the repository whose main is
# 4bcdc54: refs/pull/115/head = 699e33a, two commits past it; main does not contain it). GitHub
# serves a commit by id while a ref reaches it; a force-push of the pull request can drop it, and
# the image build then stops with one line saying how to re-pin (neuron-engine.yaml,
# InstallGemma4Port). Not vendored: the port is an unmerged pull request still changing upstream;
# a copy in this repository would freeze it outside upstream's review (its Apache-2.0 licence
# would allow it with LICENSE and NOTICE kept).
NXDI_REF = "refs/pull/115/head"
# torch-neuronx 2.9.0.x runs on PyTorch 2.9 (CPU wheels from download.pytorch.org).
NEURON_TORCH_VERSION = neuron_line().torch
NEURON_TORCHVISION_VERSION = neuron_line().torchvision


def neuron_pip_specs(line: str | None = None) -> str:
    """Space-separated pip requirement specifiers of the Neuron SDK Python packages."""
    return " ".join(f"{name}=={version}" for name, version in neuron_line(line).pip.items())


def neuron_apt_specs(line: str | None = None) -> str:
    """Space-separated apt package=version-glob specifiers of the Neuron runtime."""
    return " ".join(f"{name}={version}*" for name, version in neuron_line(line).apt.items())
