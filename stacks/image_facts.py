"""Facts about the kit's machine images that need no aws-cdk-lib: the SSM parameters they are
built from and published to, the build hosts of each pipeline, the stacks that hold them.
stacks/images.py builds the pipelines from these; stacks/image_families.py and harness.preflight
(which must not load jsii) read them too.
"""
from __future__ import annotations

# Under /imagebuilder/: the pipelines have no execution role, so Image Builder distributes (writes
# the AMI id with ssm:PutParameter) and resolves an "ssm:" parent image (ssm:GetParameter) as its
# service-linked role, AWSServiceRoleForImageBuilder, whose policy (v25, AWS Managed Policy
# Reference) allows both only on arn:aws:ssm:*:*:parameter/imagebuilder/* (reads also on
# /aws/service/*). The Image Builder User Guide, "Prerequisites for SSM output parameters", asks
# for ssm:PutParameter on the parameter in the execution role. Anywhere else the distribution
# step fails after the whole build. tests/stacks/test_image_parameters.py checks this.
PARAMETER_PREFIX = "/imagebuilder/inference-kit/ami"

# The SSM parameter each image publishes; the backend stacks read these (image_families.py).
IMAGE_PARAMETERS: dict[str, str] = {
    "vllm-cuda": f"{PARAMETER_PREFIX}/vllm-cuda",
    "vllm-sm75": f"{PARAMETER_PREFIX}/vllm-sm75",
    "neuron": f"{PARAMETER_PREFIX}/neuron",
}
# Backend image family (harness/catalog.py ``Backend.image``) -> the pipeline image that serves it.
FAMILY_IMAGE: dict[str, str] = {"gpu-x86": "vllm-cuda", "gpu-arm64": "vllm-sm75", "neuron": "neuron"}
SM75_CANDIDATE_PARAMETER = f"{PARAMETER_PREFIX}/vllm-sm75-candidate"

GPU_DLAMI = "/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
# Neuron DLAMI SSM parameters only ever point at the *latest* DLAMI of a family (Neuron DLAMI
# user guide, "Currently, SSM parameters support finding the latest DLAMI ID for each DLAMI
# type"); there is no per-SDK-version parameter. The PyTorch 2.9 family carries torch-neuronx for
# PyTorch 2.9 and NxD Inference; SDK 2.32 stopped publishing it ("the PyTorch 2.9 single-framework
# DLAMI ... no longer published", Neuron DLAMI release notes 2.32.0), so this parameter stays on
# the SDK 2.31 DLAMI, the line pins.NEURON_SDK pins. ``neuron_parent_image`` (an ami-… id found
# with describe-images, docs/images.md) overrides it.
NEURON_DLAMI = "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"

# Build and test hosts of each image's pipelines, in pipeline order (pipeline key -> instance types,
# tried in order: Image Builder uses the second type when the first has no capacity).
# vllm-sm75 build: 32 Graviton3 cores and 64 GiB: compile needs no GPU, and c7g costs less than a
# g5g of the same size.
NEURON_BUILD_INSTANCE = "inf2.xlarge"
BUILD_HOSTS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm-cuda": {"build": ("g6.xlarge",)},
    "vllm-sm75": {"build": ("c7g.8xlarge", "c7g.16xlarge"), "gpu-test": ("g5g.2xlarge",)},
    "neuron": {"build": (NEURON_BUILD_INSTANCE,)},
}
# The public parameter each image's first pipeline starts from (neuron: unless neuron_parent_image).
PARENT_PARAMETERS: dict[str, str] = {
    "vllm-cuda": GPU_DLAMI.format(arch="x86_64"),
    "vllm-sm75": GPU_DLAMI.format(arch="arm64"),
    "neuron": NEURON_DLAMI,
}
IMAGE_STACKS: dict[str, str] = {"vllm-cuda": "VllmCudaImageStack", "vllm-sm75": "VllmSm75ImageStack",
                                "neuron": "NeuronImageStack"}
