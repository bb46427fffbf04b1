"""EC2 Image Builder pipelines for the kit's three machine images, one stack per image.

- ``VllmCudaImageStack`` (x86_64, for g6): GPU DLAMI + pinned vLLM wheel (+ the g6 model's
  weights pre-pulled into the engine's Hugging Face cache), built and tested on a g6.xlarge.
- ``VllmSm75ImageStack`` (arm64, for g5g): two pipelines. ``build`` compiles PyTorch and vLLM
  for sm_75 with the Turing patch on a Graviton host with no GPU and publishes a *candidate*;
  ``gpu-test`` boots the candidate on a g5g, serves one completion in its test phase and only
  then publishes the image the g5g backend reads.
- ``NeuronImageStack`` (x86_64, for inf2 and trn1): the SDK 2.28 Neuron DLAMI + that release's Neuron
  pins (kit/pins.py) + the kit's Neuron engine (ami/neuron) with its launcher, built and tested on an
  inf2.8xlarge (an inf2.xlarge's chip with the host memory the compile needs) for inf2.xlarge.
  ``-c neuron_sdk=2.31`` builds ``NeuronSdk231ImageStack`` instead (its own pipeline and SSM
  parameter; both can exist side by side): not supported upstream on inf2/trn1, for trying.

Every pipeline publishes its AMI id to an SSM parameter (``/imagebuilder/inference-kit/ami/<image>``, data type
``aws:ec2:image``) through Image Builder's distribution settings; the backend stacks read it at
deploy time (kit/image_families.py). Pipelines have no schedule: nothing builds, and nothing
is billed, until someone runs ``aws imagebuilder start-image-pipeline-execution`` (docs/images.md).

Catalog facts read (kit/catalog.py): each selected backend's image family (``Backend.image``,
which decides the pipelines built) and the model it serves (pre-pulled into the vllm-cuda image,
served by the vllm-sm75 GPU test). Which backends boot which image is kit/image_families.py's
and stacks/ec2_backend.py's business, not this module's: it only builds pipelines.

Every build and test volume, and so every AMI snapshot, is encrypted under a customer managed KMS
key: the image stack's own (``alias/inference-kit/<image>``, ``ImagePipelineStack._volume_key``
says why its policy is what it is), or the one given with ``-c image_kms_key``. An AMI whose
snapshots are under the AWS managed ``aws/ebs`` key cannot be shared with another account; one
under a customer managed key can, with the key (docs/images.md).

Component documents are the YAML files in ami/components/, uploaded as they are; values are
injected as Image Builder component parameters (versions from kit/pins.py, S3 URIs of assets).
Image Builder components and recipes are immutable per version, so each version is derived from
a digest of its content: change a document or a pin and the next deploy creates a new version.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import aws_cdk as cdk
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_imagebuilder as imagebuilder
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kit import pins
from stacks import nag
from stacks.az_choice import OfferedSubnet
from kit import subnets
from kit.catalog import BACKENDS, instance_arch
from kit.fit import PlanError, neuron_compile
from kit.config import ConfigError, KitConfig
from stacks.package import package_scheme
from kit.image_facts import (BUILD_HOSTS, FAMILY_IMAGE, GPU_DLAMI, IMAGE_PARAMETERS,  # noqa: F401 (re-exported)
                             IMAGE_STACKS, KEY_OUTPUT, NEURON_BUILD_HOST, NEURON_DLAMI, NEURON_PRECOMPILE_TARGET,
                             PARAMETER_PREFIX, key_alias, key_tags,
                             NEURON_IMAGES, PARENT_AMI_NAMES, SM75_CANDIDATE_PARAMETER, lifecycle_tags, neuron_image,
                             pipeline_name)
from stacks.custom_resource import HandlerFunction
from kit.weights import UNPINNED

AMI_DIR = Path(__file__).resolve().parent.parent / "ami"
COMPONENTS_DIR = AMI_DIR / "components"

# Builds each pipeline keeps; older ones are deleted with their AMIs and snapshots by an Image
# Builder lifecycle policy, except AMIs launched in the last LIFECYCLE_KEEP_LAUNCHED_DAYS days.
LIFECYCLE_KEEP_IMAGES = 2
LIFECYCLE_KEEP_LAUNCHED_DAYS = 14



def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def semantic_version(*parts: str) -> str:
    """Image Builder needs a new x.y.z whenever a component or recipe changes: derive it."""
    return f"1.0.{int(_digest(*parts)[:6], 16)}"


def component_name(image: str, doc_name: str) -> str:
    """Image Builder component names are unique per account and region: a document shared by
    several images (python-uv) gets the image in its name; image-specific ones keep theirs."""
    short = doc_name.removeprefix("inference-kit-")
    return doc_name if short.startswith(image) else f"inference-kit-{image}-{short}"


def load_component(file_name: str) -> tuple[str, dict]:
    """The component document's text and its parsed form."""
    text = (COMPONENTS_DIR / file_name).read_text()
    return text, yaml.safe_load(text)


@dataclass(frozen=True)
class ComponentUse:
    """One component document in a recipe and the parameter values it receives."""

    file: str
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineSpec:
    """One Image Builder pipeline: what it builds on, from what, and where it publishes."""

    key: str  # e.g. "build"; names resources "<image>-<key>"
    # "ssm:/path", an ami-… id, or "name:<AMI name>": an Amazon-owned AMI found by its exact name
    # at deploy time (Custom::AmiByName), for a DLAMI no SSM parameter names any more.
    parent_image: str
    instance_types: tuple[str, ...]
    components: tuple[ComponentUse, ...]
    publish_parameter: str
    volume_gib: int
    tests_enabled: bool
    description: str
    ami_tags: Mapping[str, str] = field(default_factory=dict)  # besides the kit's own (baked_tags)


@dataclass(frozen=True)
class ImageSpec:
    image: str  # vllm-cuda | vllm-sm75 | neuron
    stack_name: str
    arch: str  # x86_64 | arm64
    description: str
    asset_include: tuple[str, ...]  # directories of ami/ shipped to the build host
    pipelines: Callable[[str], tuple[PipelineSpec, ...]]  # assets S3 URI -> pipelines


def _uv() -> ComponentUse:
    return ComponentUse("python-uv.yaml", {"UvVersion": pins.UV_VERSION, "PythonVersion": pins.PYTHON_VERSION})


def served_model(config: KitConfig, image: str) -> str | None:
    """The model of the first selected backend that boots ``image``; None when none is selected."""
    return next((bc.model_id for bc in config.backends
                 if FAMILY_IMAGE.get(BACKENDS[bc.id].image or "") == image), None)


def default_model(image: str) -> str:
    """The catalog's default model of the first backend that boots ``image``."""
    return next(b.model_id for b in BACKENDS.values() if FAMILY_IMAGE.get(b.image or "") == image)


def served_revision(config: KitConfig, image: str) -> str | None:
    """The commit pinned for the model ``served_model`` names (kit/weights.py), None when unpinned."""
    return next((bc.model_revision for bc in config.backends
                 if FAMILY_IMAGE.get(BACKENDS[bc.id].image or "") == image), None)


def baked_tags(model: str, revision: str | None) -> dict[str, str]:
    """AMI tags naming the weights an image holds: the model and the commit pinned for it; an
    unpinned build takes the newest commit and writes it into the image only
    (/etc/inference-kit/*-revision, which the boot records), so its tag says ``unpinned``."""
    if model == "none":
        return {}
    return {"kit-model": model, "kit-model-revision": revision or UNPINNED}


def vllm_cuda_spec(config: KitConfig) -> ImageSpec:
    prepull = served_model(config, "vllm-cuda") or "none"
    if package_scheme(prepull):  # a package is synced from S3 at boot (stacks/package.py), not pulled
        prepull = "none"
    revision = served_revision(config, "vllm-cuda") if prepull != "none" else None

    def pipelines(assets: str) -> tuple[PipelineSpec, ...]:
        return (PipelineSpec(
            key="build", parent_image="ssm:" + GPU_DLAMI.format(arch="x86_64"),
            instance_types=BUILD_HOSTS["vllm-cuda"]["build"], volume_gib=150, tests_enabled=True,
            publish_parameter=IMAGE_PARAMETERS["vllm-cuda"],
            description=f"vLLM {pins.VLLM_VERSION} on the x86_64 GPU DLAMI for g6; weights: {prepull}",
            components=(_uv(), ComponentUse("vllm-cuda.yaml", {
                "VllmVersion": pins.VLLM_VERSION, "PythonVersion": pins.PYTHON_VERSION,
                "AssetsS3Uri": assets, "PrePullModel": prepull, "ModelRevision": revision or "none",
                "HfTokenSecret": config.hf_token_secret,
            })), ami_tags=baked_tags(prepull, revision),
        ),)

    return ImageSpec("vllm-cuda", IMAGE_STACKS["vllm-cuda"], "x86_64",
                     "Inference kit image pipeline: vLLM (CUDA wheels) for g6", ("scripts",), pipelines)


def vllm_sm75_spec(config: KitConfig) -> ImageSpec:
    model = served_model(config, "vllm-sm75") or default_model("vllm-sm75")

    def pipelines(assets: str) -> tuple[PipelineSpec, ...]:
        build = PipelineSpec(
            key="build", parent_image="ssm:" + GPU_DLAMI.format(arch="arm64"),
            # c7g: compile needs no GPU (kit/image_facts.py BUILD_HOSTS says why these types)
            instance_types=BUILD_HOSTS["vllm-sm75"]["build"], volume_gib=150, tests_enabled=False,
            publish_parameter=SM75_CANDIDATE_PARAMETER,
            description=f"Build: PyTorch {pins.TORCH_VERSION} + vLLM {pins.VLLM_VERSION} for sm_75 "
                        "(Turing patch) on Graviton without a GPU",
            components=(_uv(), ComponentUse("vllm-sm75-build.yaml", {
                "TorchVersion": pins.TORCH_VERSION, "VllmVersion": pins.VLLM_VERSION,
                "VllmSdistSha256": pins.VLLM_SDIST_SHA256, "PatchFile": pins.SM75_PATCH,
                "ArchList": pins.SM75_ARCH_LIST, "CudaHome": pins.SM75_CUDA_HOME,
                "PythonVersion": pins.PYTHON_VERSION, "AssetsS3Uri": assets,
            })),
        )
        gpu_test = PipelineSpec(
            key="gpu-test", parent_image="ssm:" + SM75_CANDIDATE_PARAMETER,
            instance_types=BUILD_HOSTS["vllm-sm75"]["gpu-test"], volume_gib=150, tests_enabled=True,
            publish_parameter=IMAGE_PARAMETERS["vllm-sm75"],
            description="Promote: the candidate serves one completion of the kit's model on a T4G",
            components=(ComponentUse("vllm-sm75-gpu-test.yaml", {
                "Model": model, "ModelRevision": served_revision(config, "vllm-sm75") or "none",
                "HfTokenSecret": config.hf_token_secret}),),
        )
        return build, gpu_test

    return ImageSpec("vllm-sm75", IMAGE_STACKS["vllm-sm75"], "arm64",
                     "Inference kit image pipelines: vLLM built for sm_75 (g5g)", ("patches", "scripts"), pipelines)


# Besides transformers the engine imports aiohttp (server), renders chat templates with Jinja2 and
# enforces structured output (response_format, forced tool choices) with llguidance (one abi3 wheel,
# no dependencies: ami/neuron/structured.py).
# transformers and huggingface_hub (which gives the instance `hf download` for the checkpoint
# directory) and tokenizers are the Neuron line's (kit/pins.py NeuronLine.engine_pip: NxD Inference's
# transformers==4.57.*), not the dev environment's transformers 5.
ENGINE_EXTRA = ("aiohttp", "Jinja2", "llguidance")


def engine_pip_specs(line: str | None = None) -> str:
    """Exact pins of the engine's packages on the Neuron image: the line's transformers set plus
    ENGINE_EXTRA, versions from constraints.txt."""
    lines = (AMI_DIR.parent / "constraints.txt").read_text().splitlines()
    specs = [ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()]
    locked = {s.split("==")[0].lower(): s for s in specs if "==" in s}
    missing = [n for n in ENGINE_EXTRA if n.lower() not in locked]
    if missing:
        raise ValueError(f"constraints.txt pins none of {missing}; the Neuron image needs exact versions")
    return " ".join([*pins.neuron_line(line).engine_pip, *(locked[n.lower()] for n in ENGINE_EXTRA)])


# neuron-engine.yaml's parameters for a Neuron compile, each "none" when nothing is compiled in.
NEURON_COMPILE_PARAMETERS = ("PrecompileModel", "CompileArgs")


def neuron_precompile(config: KitConfig) -> dict[str, str]:
    """What the Neuron image compiles in (neuron-engine.yaml, PrecompileModel): the model of the
    first selected backend that boots the neuron image on the precompile target's type
    (NEURON_PRECOMPILE_TARGET, inf2.xlarge; the build runs on NEURON_BUILD_HOST, the same chip with
    the host memory the compile needs: kit/image_facts.py), with the shapes the planner decides
    for it there (kit/fit.py ``neuron_compile``: the same call, on the same facts, that gives the
    backend's stack its KIT_* variables, stacks/ec2_backend.py), so its boot on that type finds
    graphs with the same cache key and loads without compiling. Nothing when no selected backend
    boots the neuron image on that type."""
    bc = next((bc for bc in config.backends if FAMILY_IMAGE.get(BACKENDS[bc.id].image or "") == "neuron"
               and bc.instance_type == NEURON_PRECOMPILE_TARGET), None)
    if bc is None:
        return dict.fromkeys((*NEURON_COMPILE_PARAMETERS, "ModelRevision"), "none")
    try:
        nc = neuron_compile(bc.id, NEURON_PRECOMPILE_TARGET, bc.model_id, config.max_model_len)
    except PlanError as e:  # the backend's own stack refuses the same, first (stacks/sizing.py)
        raise ConfigError(f"{bc.id}_instance_type={NEURON_PRECOMPILE_TARGET!r}: {e}") from None
    return {"PrecompileModel": bc.model_id, "CompileArgs": " ".join(nc.engine_args()),
            "ModelRevision": bc.model_revision or "none"}


def neuron_spec(config: KitConfig, parent_ami: str | None = None) -> ImageSpec:
    """The Neuron image of the configured SDK line (``-c neuron_sdk``, default kit/pins.py
    NEURON_DEFAULT_LINE): each line has its own image name, stack, pipeline and SSM parameter."""
    line = pins.neuron_line(config.neuron_sdk)
    image = neuron_image(line.line)
    parent = parent_ami or (f"ssm:{line.parent_parameter}" if line.parent_parameter else f"name:{line.parent_ami_name}")
    compile_in = neuron_precompile(config)
    revision = None if compile_in["ModelRevision"] == "none" else compile_in["ModelRevision"]

    def pipelines(assets: str) -> tuple[PipelineSpec, ...]:
        return (PipelineSpec(
            key="build", parent_image=parent,
            instance_types=BUILD_HOSTS[image]["build"], volume_gib=200, tests_enabled=True,
            publish_parameter=IMAGE_PARAMETERS[image],
            description=f"Neuron SDK {line.sdk} pins and the kit's Neuron engine for inf2/trn1 ({line.status})",
            components=(_uv(), ComponentUse("neuron-engine.yaml", {
                "PythonVersion": pins.PYTHON_VERSION, "AssetsS3Uri": assets,
                "NeuronSdk": line.sdk, "NeuronPip": pins.neuron_pip_specs(line.line),
                "NeuronApt": pins.neuron_apt_specs(line.line), "KernelHold": " ".join(pins.KERNEL_HOLD),
                "TorchVersion": line.torch,
                "TorchvisionVersion": line.torchvision,
                "EnginePip": engine_pip_specs(line.line), "NxdiRepo": pins.NXDI_REPO, "NxdiCommit": pins.NXDI_COMMIT,
                "NxdiRef": pins.NXDI_REF,
                "TorchIndexUrl": pins.TORCH_CPU_INDEX, "NeuronIndexUrl": pins.NEURON_PIP_INDEX,
                "NeuronToolsBin": pins.NEURON_TOOLS_BIN, "HfTokenSecret": config.hf_token_secret,
                **compile_in,
            })), ami_tags=baked_tags(compile_in["PrecompileModel"], revision),
        ),)

    return ImageSpec(image, IMAGE_STACKS[image], "x86_64",
                     f"Inference kit image pipeline: Neuron SDK {line.sdk} + kit engine (inf2, trn1): {line.status}",
                     ("neuron", "neuron-port", "scripts"), pipelines)


class ImagePipelineStack(cdk.Stack):
    """The pipelines of one image: components, recipes, build infrastructure, distribution.

    Attributes: ``pipelines`` (key -> CfnImagePipeline), ``recipes``, ``components``
    (file -> CfnComponent), ``role``, ``security_group``, ``subnet``, ``assets``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, spec: ImageSpec, config: KitConfig,
                 vpc: ec2.IVpc, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.spec = spec
        name = f"inference-kit-{spec.image}"

        # Build network: a public subnet of its own in the kit VPC, public IPv4 on launch (Image
        # Builder cannot ask for one, and the VPC has no NAT), in an AZ that offers every build
        # and test type of this image's pipelines in this account (stacks/az_choice.py; image_az
        # is a preference it checks), not the region's first AZ.
        build_types = list(dict.fromkeys(t for p in spec.pipelines("s3://unused") for t in p.instance_types))
        self.placement = OfferedSubnet(
            self, "BuildPlacement", vpc=vpc, instance_types=build_types, preferred_az=config.image_az,
            cidr_base=subnets.image_block(spec.image), map_public_ip_on_launch=True)
        self.subnet = self.placement.subnet
        self.security_group = ec2.SecurityGroup(
            self, "BuildSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"{name} build and test instances: no inbound, HTTP(S) out",
        )
        for port, why in ((443, "HTTPS: PyPI, GitHub, Hugging Face, AWS APIs"), (80, "HTTP: Ubuntu mirrors")):
            self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), why)

        # What the build host may do: Image Builder's and SSM's own minimum, read its assets
        # and the Hugging Face token (test phases serve the gated model). Nothing else.
        self.role = iam.Role(
            self, "InstanceRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{name} build/test instances",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in
                              ("EC2InstanceProfileForImageBuilder", "AmazonSSMManagedInstanceCore")],
        )
        secretsmanager.Secret.from_secret_name_v2(self, "HfToken", config.hf_token_secret).grant_read(self.role)
        profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[self.role.role_name])

        self.assets = s3_assets.Asset(
            self, "Assets", path=str(AMI_DIR),
            exclude=["*", *[p for d in spec.asset_include for p in (f"!{d}", f"!{d}/**")],
                     "**/__pycache__", "**/*.pyc"],
        )
        # The one object the build downloads, not the whole CDK assets bucket.
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["s3:GetObject"],
            resources=[f"arn:{self.partition}:s3:::{self.assets.s3_bucket_name}/{self.assets.s3_object_key}"]))

        self.components: dict[str, imagebuilder.CfnComponent] = {}
        self.recipes: dict[str, imagebuilder.CfnImageRecipe] = {}
        self.pipelines: dict[str, imagebuilder.CfnImagePipeline] = {}
        self.candidate_seed: ssm.CfnParameter | None = None
        # Old builds are deleted by one lifecycle policy per pipeline (Image Builder runs it daily).
        self.lifecycle_role = iam.Role(
            self, "LifecycleRole", assumed_by=iam.ServicePrincipal("imagebuilder.amazonaws.com"),
            description=f"{name}: delete old image builds, their AMIs and snapshots",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(
                "service-role/EC2ImageBuilderLifecycleExecutionPolicy")],
        )
        self.lifecycle_policies: dict[str, imagebuilder.CfnLifecyclePolicy] = {}
        self.key, self.key_arn = self._volume_key(spec.image, config.image_kms_key)
        cdk.CfnOutput(self, KEY_OUTPUT, value=self.key_arn,
                      description="KMS key the build volumes and the AMIs' snapshots are encrypted under "
                                  "(share it with an account that launches the AMIs)")
        for p in spec.pipelines(self.assets.s3_object_url):
            self._pipeline(name, p, profile)

        nag.acknowledge(self.role, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
                        "EC2InstanceProfileForImageBuilder]",
                        "AWS-maintained minimum an Image Builder build instance needs (component download, "
                        "build logs, image state); a hand copy would drift from the service")
        nag.acknowledge(self.lifecycle_role, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
                        "service-role/EC2ImageBuilderLifecycleExecutionPolicy]",
                        "The AWS-managed policy documented for Image Builder lifecycle policies; it only acts on AMIs "
                        "and snapshots tagged CreatedBy=EC2 Image Builder, and each lifecycle policy selects its own "
                        "pipeline's builds by their kit-lifecycle tag")
        nag.acknowledge(self.role, nag.SSM_CORE,
                        "Image Builder drives build and test instances through SSM Run Command; this is the "
                        "AWS-maintained minimum for the agent")

    def _volume_key(self, image: str, given: str | None) -> tuple[kms.Key | None, str]:
        """The key the recipes encrypt their volumes under: ``given`` (a key ARN, ``-c
        image_kms_key``, checked by kit.config to be in this region) or this stack's own.

        One key per image stack, not a key stack of its own: each image stack stays deployable and
        destroyable alone, no stack refers to another (stacks/wiring.py), and an organizer shares one
        image's key without the others'. $1/month per key ("Each AWS KMS key that you create in KMS
        costs $1/month (prorated hourly)", aws.amazon.com/kms/pricing).

        Its policy is the default one, the account root statement only ("Allows access to the AWS
        account and enables IAM policies", KMS Developer Guide, "Default key policy"), which an
        organizer extends (harness.account.images share grants another account the key's use). Nothing for
        Image Builder: the pipelines have no execution role, so Image Builder launches the build and
        test instances and creates the AMI as its service-linked role AWSServiceRoleForImageBuilder,
        whose own policy allows what EBS encryption asks of the launching principal, through EC2
        only: kms:Encrypt, Decrypt, ReEncryptFrom, ReEncryptTo, GenerateDataKeyWithoutPlaintext
        (encryption context key aws:ebs:id), DescribeKey, and CreateGrant with
        kms:GrantIsForAWSResource (AWS managed policy AWSServiceRoleForImageBuilder, v19, as
        recorded in zoph-io/MAMIP policies/AWSServiceRoleForImageBuilder at 1b36617); the root
        statement lets that IAM policy work. The User Guide's maintainers said the same when a
        key-policy example for the role was proposed: "due to a change in the SLR, you no longer
        have to grant EC2 Image Builder explicit access to the keys in your account"
        (awsdocs/ec2-image-builder-user-guide#4). Naming the role in the key policy would also
        break a fresh account: Image Builder creates the role with the first image built (User
        Guide, "Using service-linked roles for EC2 Image Builder"), after this stack, and a key
        policy's principals "must exist and be visible to KMS" (KMS API Reference, CreateKey
        Policy). EC2 Auto Scaling plays no part (Image Builder calls RunInstances itself), and the
        build instances' own role needs no key: EC2 decrypts the volume for them.

        Kept when the stack is deleted (RETAIN, the CDK default made explicit): the AMIs outlive
        the stack (Image Builder made them, not CloudFormation: docs/images.md), and a key pending
        deletion "can't be used in any cryptographic operations" (KMS API Reference,
        ScheduleKeyDeletion), so deleting it with the stack would make every AMI built under it,
        shared ones too, unlaunchable at once. harness.account.leftovers lists a key left so ($1/month; not
        billed while pending deletion), to be deleted after its AMIs (kit/image_facts.py
        KEY_PENDING_WINDOW_DAYS). Rotation on: AWS rotates the key material yearly, older material
        stays to decrypt what it encrypted, and AMIs keep working ("Rotating AWS KMS keys"); the
        first two rotations add $1/month each (KMS pricing)."""
        if given:
            return None, given
        key = kms.Key(
            self, "VolumeKey", enable_key_rotation=True, removal_policy=cdk.RemovalPolicy.RETAIN,
            description=(f"inference-kit {image} image: build volumes and AMI snapshots (stack {self.stack_name}). "
                         "Every AMI built under this key becomes unusable once the key is deleted or pending "
                         "deletion: delete those AMIs first."),
        )
        # An alias is a name, not the key: it goes with the stack, so a redeploy after a destroy
        # can take it for the new stack's key (the retained key keeps its description and tags).
        kms.Alias(self, "VolumeKeyAlias", alias_name=key_alias(image), target_key=key,
                  removal_policy=cdk.RemovalPolicy.DESTROY)
        for k, v in key_tags(image).items():
            cdk.Tags.of(key).add(k, v)
        return key, key.key_arn

    def _ami_by_name(self, key: str, ami_name: str) -> str:
        """The id of the Amazon-owned AMI named ``ami_name`` in this region, found at deploy time
        (stacks/lambdas/ami_by_name): a token for the recipe's parent image."""
        lookup = HandlerFunction(
            self, handler="ami_by_name",
            ids=(f"{key}ParentLookupLogs", f"{key}ParentLookupRole", f"{key}ParentLookup"),
            role_description="Custom::AmiByName: find the parent DLAMI by its name",
            description="Custom::AmiByName: the parent DLAMI's id by its name (stacks/images.py)",
            statements=[iam.PolicyStatement(sid="DescribeImages", actions=["ec2:DescribeImages"], resources=["*"])],
            any_resource_reason="ec2:DescribeImages supports no resource-level permissions (Service "
                                "Authorization Reference, Amazon EC2)")
        found = lookup.resource(self, f"{key}Parent", resource_type="Custom::AmiByName",
                                properties={"Name": ami_name}, service_timeout=cdk.Duration.minutes(2))
        return found.get_att_string("ImageId")

    def _pipeline(self, name: str, p: PipelineSpec, profile: iam.CfnInstanceProfile) -> None:
        pname = pipeline_name(self.spec.image, p.key)
        wrong = [t for t in p.instance_types if instance_arch(t) != self.spec.arch]
        if wrong:  # an arm64 image cannot be built or tested on x86_64, nor the reverse
            raise ConfigError(f"{pname}: {', '.join(wrong)} is not {self.spec.arch}, the image's architecture")
        key = "".join(w.capitalize() for w in p.key.split("-"))
        uses = []
        for use in p.components:
            text, doc = load_component(use.file)
            comp = self.components.get(use.file)
            if comp is None:
                comp = imagebuilder.CfnComponent(
                    self, "Component" + "".join(w.capitalize() for w in use.file[:-5].split("-")),
                    name=component_name(self.spec.image, doc["name"]), platform="Linux",
                    version=semantic_version(text), data=text,
                    description=" ".join(doc.get("description", "").split())[:1024],
                )
                self.components[use.file] = comp
            uses.append(imagebuilder.CfnImageRecipe.ComponentConfigurationProperty(
                component_arn=comp.attr_arn,
                parameters=[imagebuilder.CfnImageRecipe.ComponentParameterProperty(name=k, value=[v])
                            for k, v in use.parameters.items()] or None,
            ))
        # A token (the assets' S3 URI) is a placeholder whose number depends on what else was
        # built: leave it out, the assets' content hash below stands for it.
        parent_image = p.parent_image
        if parent_image.startswith("name:"):
            parent_image = self._ami_by_name(key, parent_image.removeprefix("name:"))
        # The volumes' key: the stack's own stands for itself (a token until deploy), a given one
        # by its ARN; another key is another recipe version (a recipe version is immutable).
        key_label = self.key_arn if self.key is None else f"own-key:{self.spec.image}"
        recipe_digest = [p.parent_image, str(p.volume_gib), key_label] + [
            f"{u.file}:{load_component(u.file)[0]}:"
            f"{sorted((k, '<token>' if cdk.Token.is_unresolved(v) else v) for k, v in u.parameters.items())}"
            for u in p.components]
        recipe = imagebuilder.CfnImageRecipe(
            self, f"{key}Recipe", name=pname,
            version=semantic_version(*recipe_digest, self.assets.asset_hash),
            parent_image=parent_image, description=p.description[:1024],
            components=uses,
            block_device_mappings=[imagebuilder.CfnImageRecipe.InstanceBlockDeviceMappingProperty(
                device_name="/dev/sda1",
                ebs=imagebuilder.CfnImageRecipe.EbsInstanceBlockDeviceSpecificationProperty(
                    encrypted=True, kms_key_id=self.key_arn, volume_size=p.volume_gib, volume_type="gp3",
                    delete_on_termination=True),
            )],
        )
        self.recipes[p.key] = recipe
        if p.parent_image == "ssm:" + SM75_CANDIDATE_PARAMETER:
            # The promote recipe boots the candidate, whose snapshots are under this stack's key (the
            # build recipe's volume): its own volume names the same key, so the promoted AMI is too.
            # The promote recipe's parent parameter must exist before the first build: seed it with
            # the plain arm64 DLAMI; the build pipeline overwrites it with its candidate. Promoting
            # the seed fails clearly at CheckTuringGpu's vLLM import. A dynamic reference, not an
            # SSM-typed stack parameter: CloudFormation re-resolves the latter on every update and
            # would put the plain DLAMI back over a built candidate whenever the DLAMI moved.
            self.candidate_seed = ssm.CfnParameter(
                self, "CandidateSeed", name=SM75_CANDIDATE_PARAMETER, type="String", data_type="aws:ec2:image",
                value=f"{{{{resolve:ssm:{GPU_DLAMI.format(arch='arm64')}}}}}",
                description="vllm-sm75 build candidate (overwritten by the build pipeline)",
            )
            recipe.node.add_dependency(self.candidate_seed)
        infra = imagebuilder.CfnInfrastructureConfiguration(
            self, f"{key}Infrastructure", name=pname, instance_profile_name=profile.ref,
            instance_types=list(p.instance_types), subnet_id=self.subnet.subnet_id,
            security_group_ids=[self.security_group.security_group_id],
            terminate_instance_on_failure=True,
            instance_metadata_options=imagebuilder.CfnInfrastructureConfiguration.InstanceMetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=2),
            description=f"{pname}: {', '.join(p.instance_types)}, no inbound, IMDSv2",
        )
        # No kmsKeyId in the distribution: it names "the KMS key used to encrypt the distributed
        # image" (Image Builder API Reference, AmiDistributionConfiguration), the key "used to
        # encrypt the image for distribution to the target Region" (User Guide, "Create and update
        # AMI distribution configurations"), i.e. for a copy. This distribution is to the build
        # Region only, and the AMI's snapshots are taken from volumes already under the recipe's key
        # (EBS User Guide, "How Amazon EBS encryption works": an encrypted volume's snapshots, and the
        # volumes made from them, are encrypted). The recipe's kmsKeyId is what matters: without it
        # an encrypted volume is "encrypted by your account's default KMS key for EBS encryption"
        # (EBS User Guide, "Amazon EBS encryption examples"), the aws/ebs key no other account can use.
        distribution = imagebuilder.CfnDistributionConfiguration(
            self, f"{key}Distribution", name=pname, description=f"{pname} AMI, id published to {p.publish_parameter}",
            distributions=[imagebuilder.CfnDistributionConfiguration.DistributionProperty(
                region=self.region,
                ami_distribution_configuration={
                    "Name": f"{pname}-{{{{ imagebuilder:buildDate }}}}",
                    "Description": p.description[:1000],
                    "AmiTags": {"project": "aws-inference-kit", "kit-image": self.spec.image,
                                "kit-pipeline": p.key, **p.ami_tags},
                },
                ssm_parameter_configurations=[
                    imagebuilder.CfnDistributionConfiguration.SsmParameterConfigurationProperty(
                        parameter_name=p.publish_parameter, data_type="aws:ec2:image")],
            )],
        )
        # No schedule: a build starts only when someone starts it (hours, and money, per build).
        pipeline = imagebuilder.CfnImagePipeline(
            self, f"{key}Pipeline", name=pname, description=p.description[:1024],
            image_recipe_arn=recipe.attr_arn, infrastructure_configuration_arn=infra.attr_arn,
            distribution_configuration_arn=distribution.attr_arn, status="ENABLED",
            enhanced_image_metadata_enabled=True,
            image_tags=lifecycle_tags(self.spec.image, p.key),  # scheduled builds; manual: harness.account.images
            image_tests_configuration=imagebuilder.CfnImagePipeline.ImageTestsConfigurationProperty(
                image_tests_enabled=p.tests_enabled, timeout_minutes=120),
        )
        self.pipelines[p.key] = pipeline
        # Image Builder streams build logs to "/aws/imagebuilder/<ImageName>" (the recipe's name;
        # User Guide, "CloudWatch Logs integration") and creates that group itself, never expiring
        # and outside the stack. Made here, it has a retention and goes with the stack.
        build_logs = logs.LogGroup(self, f"{key}BuildLogs", log_group_name=f"/aws/imagebuilder/{pname}",
                                   retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY)
        pipeline.node.add_dependency(build_logs)
        self.lifecycle_policies[p.key] = imagebuilder.CfnLifecyclePolicy(
            self, f"{key}Lifecycle", name=pname, execution_role=self.lifecycle_role.role_arn,
            resource_type="AMI_IMAGE", status="ENABLED",
            description=f"Keep the newest {LIFECYCLE_KEEP_IMAGES} {pname} builds; delete older AMIs and snapshots",
            resource_selection=imagebuilder.CfnLifecyclePolicy.ResourceSelectionProperty(
                tag_map=lifecycle_tags(self.spec.image, p.key)),
            policy_details=[imagebuilder.CfnLifecyclePolicy.PolicyDetailProperty(
                action=imagebuilder.CfnLifecyclePolicy.ActionProperty(
                    type="DELETE",
                    include_resources=imagebuilder.CfnLifecyclePolicy.IncludeResourcesProperty(
                        amis=True, snapshots=True)),
                filter=imagebuilder.CfnLifecyclePolicy.FilterProperty(type="COUNT", value=LIFECYCLE_KEEP_IMAGES),
                exclusion_rules=imagebuilder.CfnLifecyclePolicy.ExclusionRulesProperty(
                    amis=imagebuilder.CfnLifecyclePolicy.AmiExclusionRulesProperty(
                        last_launched=imagebuilder.CfnLifecyclePolicy.LastLaunchedProperty(
                            unit="DAYS", value=LIFECYCLE_KEEP_LAUNCHED_DAYS))),
            )],
        )
        cdk.CfnOutput(self, f"{key}PipelineArn", value=pipeline.attr_arn,
                      description="aws imagebuilder start-image-pipeline-execution --image-pipeline-arn <this>")
        cdk.CfnOutput(self, f"{key}AmiParameter", value=p.publish_parameter,
                      description="SSM parameter the built AMI id is written to")


def image_specs(config: KitConfig) -> dict[str, ImageSpec]:
    """The image pipelines the selected backends need, by image name: none for a family whose
    every selected backend boots an AMI given by id (kit/image_needs.py pipeline_families)."""
    from kit.image_needs import pipeline_families

    wanted = {FAMILY_IMAGE[family] for family in pipeline_families(config)}
    makers = {"vllm-cuda": lambda: vllm_cuda_spec(config), "vllm-sm75": lambda: vllm_sm75_spec(config),
              "neuron": lambda: neuron_spec(config, config.neuron_parent_image)}
    # The neuron family's image is the configured SDK line's (its own name when not the default).
    return {spec.image: spec for spec in (makers[k]() for k in ("vllm-cuda", "vllm-sm75", "neuron") if k in wanted)}
