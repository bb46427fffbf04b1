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

# Neuron SDK line: 2.31.0 (2026-07-07). Why this line and not 2.28 or 2.30: docs/images.md,
# "Choosing the Neuron SDK line". In short: the pinned Gemma 4 E2B port (NXDI_COMMIT) says it was
# tested on SDK 2.30 (neuronx-cc 2.25), which no longer hit its text context-encoding compiler
# error (NCC_INLA001); nothing shows that code compiling on 2.28 (neuronx-cc 2.23), whatever
# 2.28's official inf2/trn1 support; 2.31 is NxD Inference's last release and the
# one kept on critical fixes for Inf2/Trn1 (announce-nxdi-maintenance-support-2-31 in
# aws-neuron/aws-neuron-sdk v2.32.0), and the PyTorch 2.9 DLAMI the image builds on
# (stacks/images.py NEURON_DLAMI) was last published with 2.31. Versions: the 2.31.0 release content,
# src/helperscripts/n2-manifest.json at aws-neuron/aws-neuron-sdk tag v2.31.1 (inf2 packages).
NEURON_SDK = "2.31.0"
NEURON_PIP = {
    "torch-neuronx": "2.9.0.2.15.32035",
    "neuronx-cc": "2.26.6360.0",
    # 2.31 lists libneuronxla 2.2.17544.0 and 3.0.3854.0; the 2.2 line is the one torch-neuronx
    # 2.9 has used since SDK 2.28 (2.2.15515.0 there), 3.0 arrived with torch-xla 2.10+.
    "libneuronxla": "2.2.17544.0",
    "neuronx-distributed": "0.19.28492",
    "neuronx-distributed-inference": "0.10.18399",
}
NEURON_APT = {
    "aws-neuronx-runtime-lib": "2.33.10.0",
    "aws-neuronx-collectives": "2.33.10.0",
    "aws-neuronx-tools": "2.31.13.0",
}
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
NEURON_TORCH_VERSION = "2.9.0"
def neuron_pip_specs() -> str:
    """Space-separated pip requirement specifiers of the Neuron SDK Python packages."""
    return " ".join(f"{name}=={version}" for name, version in NEURON_PIP.items())


def neuron_apt_specs() -> str:
    """Space-separated apt package=version-glob specifiers of the Neuron runtime."""
    return " ".join(f"{name}={version}*" for name, version in NEURON_APT.items())
