"""Facts about the kit's machine images that need no aws-cdk-lib: the SSM parameters they are
built from and published to, the build hosts of each pipeline, the stacks that hold them.
stacks/images.py builds the pipelines from these; kit/image_families.py and harness.account.preflight
(which must not load jsii) read them too.
"""
from __future__ import annotations

from kit import pins

# Under /imagebuilder/: the pipelines have no execution role, so Image Builder distributes (writes
# the AMI id with ssm:PutParameter) and resolves an "ssm:" parent image (ssm:GetParameter) as its
# service-linked role, AWSServiceRoleForImageBuilder, whose policy (v25, AWS Managed Policy
# Reference) allows both only on arn:aws:ssm:*:*:parameter/imagebuilder/* (reads also on
# /aws/service/*). The Image Builder User Guide, "Prerequisites for SSM output parameters", asks
# for ssm:PutParameter on the parameter in the execution role. Anywhere else the distribution
# step fails after the whole build. tests/stacks/test_image_parameters.py checks this.
PARAMETER_PREFIX = "/imagebuilder/inference-kit/ami"


def neuron_image(line: str | None = None) -> str:
    """The image name of a Neuron SDK line (kit/pins.py): "neuron" for the default line, its own
    name for every other, so the lines' pipelines, stacks and parameters exist side by side."""
    return pins.neuron_line(line).image


NEURON_IMAGES: dict[str, str] = {line: neuron_image(line) for line in pins.NEURON_LINES}  # line -> image
# The SSM parameter each image publishes; the backend stacks read these (image_families.py). Each
# Neuron line has its own, named by its SDK line (an AMI of one line is never booted as another's).
IMAGE_PARAMETERS: dict[str, str] = {
    "vllm-cuda": f"{PARAMETER_PREFIX}/vllm-cuda",
    "vllm-sm75": f"{PARAMETER_PREFIX}/vllm-sm75",
    **{image: f"{PARAMETER_PREFIX}/neuron-sdk{line.replace('.', '')}" for line, image in NEURON_IMAGES.items()},
}
# Backend image family (kit/catalog.py ``Backend.image``) -> the pipeline image that serves it.
FAMILY_IMAGE: dict[str, str] = {"gpu-x86": "vllm-cuda", "gpu-arm64": "vllm-sm75", "neuron": "neuron"}
SM75_CANDIDATE_PARAMETER = f"{PARAMETER_PREFIX}/vllm-sm75-candidate"

GPU_DLAMI = "/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
# Neuron DLAMI SSM parameters only ever point at the *latest* DLAMI of a family (Neuron DLAMI
# user guide, "Currently, SSM parameters support finding the latest DLAMI ID for each DLAMI
# type"); there is no per-SDK-version parameter. The PyTorch 2.9 family carries torch-neuronx for
# PyTorch 2.9 and NxD Inference; SDK 2.32 stopped publishing it ("the PyTorch 2.9 single-framework
# DLAMI ... no longer published", Neuron DLAMI release notes 2.32.0), so this parameter stays on
# the SDK 2.31 DLAMI: the parent of the 2.31 line (-c neuron_sdk=2.31). The default 2.28 line
# starts from its DLAMI found by name (PARENT_AMI_NAMES below). ``neuron_parent_image`` (an ami-… id found
# with describe-images, docs/images.md) overrides it.
NEURON_DLAMI = "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"

# Build and test hosts of each image's pipelines, in pipeline order (pipeline key -> instance types,
# tried in order: Image Builder uses the second type when the first has no capacity).
# vllm-sm75 build: 32 Graviton3 cores and 64 GiB: compile needs no GPU, and c7g costs less than a
# g5g of the same size.
# Neuron: the image compiles the graphs an inf2.xlarge boot loads (NEURON_PRECOMPILE_TARGET: the
# shapes are planned for it, and only a backend on it gets them), on a host that holds the compile
# (NEURON_BUILD_HOST). Compiling Gemma 4 E2B peaks near 24.5 GiB of host memory
# (ami/neuron/boot_budget.py, each copy with its source), over an inf2.xlarge's 16 GiB. An
# inf2.8xlarge has 128 GiB and 32 vCPUs around the same single Inferentia2 chip (2 NeuronCores;
# Neuron docs inf2-arch.rst at v2.31.1 l.32-50), so what it compiles and its test phase serves is
# what an inf2.xlarge loads: the same platform (inf2: neuronx-cc targets the instance family, and
# NxD maps inf2 to one hardware target, neuronx_distributed/utils/utils.py l.6-22 at 73ab227), the
# same tp degrees and NeuronCores (kit/catalog.py), LNC 1 on both (the launcher's
# NEURON_LOGICAL_NC_CONFIG=1), and a cache key that names none of the host's size
# (ami/neuron/neuron_config.py cache_key). tests/stacks/test_neuron_build_host.py checks these.
NEURON_PRECOMPILE_TARGET = "inf2.xlarge"
NEURON_BUILD_HOST = "inf2.8xlarge"
BUILD_HOSTS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm-cuda": {"build": ("g6.xlarge",)},
    "vllm-sm75": {"build": ("c7g.8xlarge", "c7g.16xlarge"), "gpu-test": ("g5g.2xlarge",)},
    **{image: {"build": (NEURON_BUILD_HOST,)} for image in NEURON_IMAGES.values()},
}
# The public parameter each image's first pipeline starts from (neuron: unless neuron_parent_image).
PARENT_PARAMETERS: dict[str, str] = {
    "vllm-cuda": GPU_DLAMI.format(arch="x86_64"),
    "vllm-sm75": GPU_DLAMI.format(arch="arm64"),
    **{image: pins.neuron_line(line).parent_parameter for line, image in NEURON_IMAGES.items()
       if pins.neuron_line(line).parent_parameter},
}
# ... or the name of the Amazon-owned AMI it starts from, found in the deploying account at deploy
# time (stacks/images.py, Custom::AmiByName): a DLAMI of an SDK line no SSM parameter names any more.
PARENT_AMI_NAMES: dict[str, str] = {
    image: pins.neuron_line(line).parent_ami_name for line, image in NEURON_IMAGES.items()
    if pins.neuron_line(line).parent_ami_name}


def pipeline_name(image: str, key: str) -> str:
    """An Image Builder pipeline's name (and its recipe's, infrastructure's, distribution's and
    lifecycle policy's): unique per account and region; harness.account.images finds pipelines by it."""
    return f"inference-kit-{image}-{key}"


# The tag a pipeline's lifecycle policy selects its builds by. Where a build's Image Builder image
# resource gets its tags from depends on who started it (botocore imagebuilder 2019-12-02
# service-2.json, shape ImagePipeline, member imageTags: "The tags that Image Builder applies to
# the Image Builder image resource that this pipeline's scheduled executions create ... Builds that
# you start manually use the tags from the StartImagePipelineExecution request instead"), and the
# lifecycle policy's tagMap selects those image resources (shape LifecyclePolicyResourceSelection).
# So the pipeline's imageTags, the lifecycle policy's tagMap (stacks/images.py) and the tags
# harness.account.images passes to StartImagePipelineExecution all come from this one function; a manual
# build without them would be kept forever.
LIFECYCLE_TAG = "kit-lifecycle"


def lifecycle_tags(image: str, key: str) -> dict[str, str]:
    """The tags that put one pipeline's builds under its lifecycle policy."""
    return {LIFECYCLE_TAG: pipeline_name(image, key)}


IMAGE_STACKS: dict[str, str] = {
    "vllm-cuda": "VllmCudaImageStack", "vllm-sm75": "VllmSm75ImageStack",
    **{image: "NeuronImageStack" if line == pins.NEURON_DEFAULT_LINE else f"NeuronSdk{line.replace('.', '')}ImageStack"
       for line, image in NEURON_IMAGES.items()},
}


# The kit's own KMS key, one per image stack (stacks/images.py ImagePipelineStack): the key the
# build and test volumes, and so the AMI's snapshots, are encrypted under. Named here so
# harness.account.images share, preflight and harness.account.leftovers find it without aws-cdk-lib. KMS keys and
# aliases are regional: each region's image stack has its own key under the same alias.
# An AMI's key is its snapshots' (DescribeSnapshots: Snapshots[].KmsKeyId, read per snapshot of
# DescribeImages' BlockDeviceMappings[].Ebs.SnapshotId; DescribeImages' own Ebs.KmsKeyId is not
# it: "only supported on BlockDeviceMapping objects called by RunInstances, RequestSpotFleet, and
# RequestSpotInstances", botocore ec2 EbsBlockDevice.KmsKeyId). The alias points at the key of the
# image stack deployed now, which is another one after a destroy and a redeploy (the old key is
# retained with the AMIs it encrypts).
KEY_ALIAS_PREFIX = "alias/inference-kit/"
# The CloudFormation output of each image stack that holds the ARN of the key its recipes use
# (the kit's own, or the one given with -c image_kms_key).
KEY_OUTPUT = "VolumeKeyArn"
# The tag every kit resource carries (stacks/wiring.py KIT_TAGS; tests/stacks/test_image_key.py
# checks they agree), and the image a key encrypts.
PROJECT_TAG = ("project", "aws-inference-kit")
# A key scheduled for deletion is not billed ("There is no charge for customer managed KMS keys
# that are scheduled for deletion", aws.amazon.com/kms/pricing) and can be recovered until its
# waiting period ends (CancelKeyDeletion); 7 to 30 days, 30 by default (botocore kms 2014-11-01,
# ScheduleKeyDeletionRequest.PendingWindowInDays). The longest: a wait costs nothing, and every
# AMI under the key is unusable while it is pending.
KEY_PENDING_WINDOW_DAYS = 30


def key_alias(image: str) -> str:
    """The alias of the kit's own key for ``image`` (``alias/inference-kit/<image>``)."""
    return KEY_ALIAS_PREFIX + image


def key_tags(image: str) -> dict[str, str]:
    """The tags on the kit's own key for ``image``: the project's, and the image it encrypts."""
    return {PROJECT_TAG[0]: PROJECT_TAG[1], "kit-image": image}
