"""Versions the image pipelines install, in one place.

Plain Python (no aws-cdk-lib): the CDK stacks pass these to the component documents as
Image Builder component parameters, and the patch check (ami/check_patch.py) reads them too.
Where a pin comes from is said next to it; tests/stacks/test_images_patch.py checks the ones
that can be checked against the vLLM source distribution.
"""
from __future__ import annotations

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

# Neuron SDK 2.28.0 (2026-02-26), the last line that fully supports inf2 and trn1 (NxD
# Inference went to maintenance on them afterwards). Versions from the SDK's release content.
NEURON_SDK = "2.28.0"
NEURON_PIP = {
    "torch-neuronx": "2.9.0.2.12.22436",
    "neuronx-cc": "2.23.6484.0",
    "libneuronxla": "2.2.15515.0",
    "neuronx-distributed": "0.17.26814",
    "neuronx-distributed-inference": "0.8.16251",
}
NEURON_APT = {
    "aws-neuronx-runtime-lib": "2.30.51.0",
    "aws-neuronx-collectives": "2.30.59.0",
    "aws-neuronx-tools": "2.28.23.0",
}
# NxD Inference's Gemma 4 E2B port lives in its contrib tree, not in the wheel; the engine
# loads it from /opt/ami/nxdi-gemma4/src. Pinned to a commit that carries the port.
NXDI_REPO = "https://github.com/aws-neuron/neuronx-distributed-inference.git"
NXDI_COMMIT = "6aa61216f7f57d7107f74cc897b19cc5f14f9a1e"
# torch-neuronx 2.9.0.x runs on PyTorch 2.9 (CPU wheels from download.pytorch.org).
NEURON_TORCH_VERSION = "2.9.0"


def neuron_pip_specs() -> str:
    """Space-separated pip requirement specifiers for the Neuron SDK 2.28 Python packages."""
    return " ".join(f"{name}=={version}" for name, version in NEURON_PIP.items())


def neuron_apt_specs() -> str:
    """Space-separated apt package=version-glob specifiers for the Neuron 2.28 runtime."""
    return " ".join(f"{name}={version}*" for name, version in NEURON_APT.items())
