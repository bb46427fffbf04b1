"""PackageStack: build quantized model packages in the user's account, where the bandwidth is.

One S3 bucket (SSE-S3, public access blocked, TLS enforced, emptied and deleted with the stack)
and one CPU-only CodeBuild project that runs ``python -m harness.package build`` with the Hugging
Face token secret, writes ``s3://<bucket>/package/<scheme>/<build number>/`` (manifest.json last)
and publishes that URI in the SSM parameter ``/inference-kit/package/<scheme>``, the way the image
pipelines publish their AMI ids (stacks/images.py). Nothing builds, and nothing is billed, until
someone starts a build:

    python -m harness.package start --scheme emb4     # start-build + the build's log until it ends

Serving a package: ``-c g6_model=package`` (emb4) or ``-c g6_model=package:<scheme>`` (also
``sagemaker_model``): g6 syncs the package from S3 through the VPC's S3 gateway endpoint and serves
the local copy with vLLM; SageMaker loads it as uncompressed S3 model data (``S3DataType``
S3Prefix, ``CompressionType`` None: SageMaker API reference, S3ModelDataSource). Their roles read
only ``package/<scheme>/``. Both stacks resolve the SSM parameter at deploy time, so a backend
deploy before the first build fails with CloudFormation's "parameter not found". SageMaker's model
takes the URI (every CreateModel property is create-only: a new build, redeployed, is a new model).
g6 does not put it in its user data: UserData is not create-only on AWS::EC2::Instance (registry
schema), so a new URI there would stop and start the instance without running the user data again
(first boot only), and the old package would go on being served; g6 reads the parameter each
time its server starts instead (userdata/engine-vllm-gpu.sh) and shows the deploy-time value as
the ``PackageUri`` output.

Catalog facts read (kit/catalog.py): ``Backend.loads_packages``, which backends' engines can
serve a package (the others refuse ``<id>_model=package`` in one config-error line).

CodeBuild ``BUILD_GENERAL1_LARGE`` on ``LINUX_CONTAINER``: 15 GB memory, 8 vCPUs, 128 GB disk (CodeBuild
User Guide, "Build environment compute modes and types", on-demand environment types; the API
reference's "up to 16 GiB" is the ARM figure). Memory: packing E2B's largest table (the per-layer
embeddings, 4.375 GiB bf16) peaked at 1.21 GiB + 1.32 x the table = 7.0 GiB (two measured
fractions of it, 1/16 and 1/8, ``_int4``), plus at most one 2 GiB shard being filled
(build.SHARD_BYTES): ~9 GiB. Disk: the source in the Hugging Face cache plus the package in
/tmp: E2B ~10 + 2.6 GB; a 31B QAT source (~62 GB bf16) + ~17 GB also fits, not tried.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from kit.catalog import BACKENDS
from kit.schemes import PARAMETER_PREFIX, PROJECT_NAME
from kit.schemes import DEFAULT_SCHEME, MODEL_WORD, SCHEMES, scheme_of_model
from stacks import nag
from kit.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
KEY_PREFIX = "package"
BUILD_TIMEOUT = cdk.Duration.hours(3)
COMPUTE = codebuild.ComputeType.LARGE  # = kit/codebuild.py COMPUTE_TYPE, whose quota preflight checks (tested)
COMPUTE_MEMORY_GB = 15  # LINUX_CONTAINER BUILD_GENERAL1_LARGE (module docstring)
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
# The Python the build runs, pinned: without runtime-versions CodeBuild takes the image's default,
# which "can change when a previously default version reaches end of life" (CodeBuild User Guide,
# "Available runtimes", which recommends pinning). standard:7.0 offers python 3.9 to 3.14 and
# defaults to 3.11 (aws/aws-codebuild-docker-images 1590e48, ubuntu/standard/7.0/runtimes.yml and
# Dockerfile `RUN pyenv global $PYTHON_311_VERSION`). 3.11: what the kit's tests run on, and the
# oldest transformers 5.23 accepts (Requires-Python >=3.11.0); tests/package/test_stack.py checks.
BUILD_PYTHON = "3.11"
STANDARD_7_0_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
# What the build needs from the kit: the package builder and its pins, nothing else.
ASSET_INCLUDE = ("harness/__init__.py", "harness/package/*.py", "kit/__init__.py", "kit/schemes.py",
                 "kit/cli.py", "kit/errors.py", "requirements-package.txt", "constraints.txt")


def stage_kit_source() -> Path:
    """A directory holding exactly ASSET_INCLUDE (a glob-excluding asset of the repository root
    would also ship dotfiles and drops files below excluded directories). Named by its content's
    digest, so identical sources give the same directory and the same asset hash."""
    files = sorted({p for pattern in ASSET_INCLUDE for p in ROOT.glob(pattern) if p.is_file()})
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    stage = Path(tempfile.gettempdir()) / f"inference-kit-package-source-{digest.hexdigest()[:16]}"
    if not stage.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="inference-kit-package-source-"))
        for p in files:
            dest = tmp / p.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)
        try:
            tmp.rename(stage)
        except OSError:  # another synth staged the same content first
            shutil.rmtree(tmp, ignore_errors=True)
    return stage


def package_scheme(model_id: str) -> str | None:
    """The scheme a ``<backend>_model`` value asks for: ``package`` -> emb4, ``package:<scheme>``."""
    try:
        s = scheme_of_model(model_id)
    except ValueError:
        name = model_id.partition(":")[2]
        raise ConfigError(f"model={model_id!r}: unknown package scheme {name!r}; valid: "
                          f"{', '.join(f'{MODEL_WORD}:{s}' for s in SCHEMES)} ({MODEL_WORD} = {MODEL_WORD}:{DEFAULT_SCHEME})") from None
    return s.name if s else None


def check_backend(backend_id: str, model_id: str) -> str | None:
    """The package scheme a backend serves, refusing backends whose engine cannot load one."""
    name = package_scheme(model_id)
    if name and not BACKENDS[backend_id].loads_packages:  # the catalog's fact about its engine
        able = ", ".join(b.id for b in BACKENDS.values() if b.loads_packages)
        raise ConfigError(f"{backend_id}_model={model_id!r}: packages are served by vLLM on x86 NVIDIA GPUs "
                          f"({able}); this backend's engine cannot load compressed-tensors int4")
    return name


def source_model(scheme_name: str) -> str:
    """The model a package is built from (decides vLLM's tool-call parser, as for any model id)."""
    return SCHEMES[scheme_name].default_source


def parameter_name(scheme_name: str) -> str:
    return f"{PARAMETER_PREFIX}/{scheme_name}"


def bucket_name() -> str:
    """One bucket per account and region, named so backend stacks scope IAM without a reference."""
    return f"inference-kit-packages-{cdk.Aws.ACCOUNT_ID}-{cdk.Aws.REGION}"


def read_statements(scheme_name: str) -> list[iam.PolicyStatement]:
    """Read one scheme's packages, nothing else of the bucket."""
    bucket_arn = f"arn:{cdk.Aws.PARTITION}:s3:::{bucket_name()}"
    prefix = f"{KEY_PREFIX}/{scheme_name}/"
    return [
        iam.PolicyStatement(sid="ReadPackage", actions=["s3:GetObject"], resources=[f"{bucket_arn}/{prefix}*"]),
        iam.PolicyStatement(sid="ListPackage", actions=["s3:ListBucket"], resources=[bucket_arn],
                            conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}}),
    ]


def parameter_statement(scheme_name: str) -> iam.PolicyStatement:
    """Read the scheme's published URI (g6 reads it each time its server starts)."""
    return iam.PolicyStatement(
        sid="ReadPackageUri", actions=["ssm:GetParameter"],
        resources=[f"arn:{cdk.Aws.PARTITION}:ssm:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:parameter{parameter_name(scheme_name)}"])


def acknowledge_read(scope: Construct, scheme_name: str) -> None:
    nag.acknowledge(scope, f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::inference-kit-packages-"
                           f"<AWS::AccountId>-<AWS::Region>/{KEY_PREFIX}/{scheme_name}/*]",
                    "Read-only on one scheme's package prefix; the build number under it is chosen at build time")


def pinned_revisions_value(pins: dict[str, str]) -> str:
    """The PINNED_REVISIONS variable: ``scheme=commit`` words, the source commit each scheme's build
    takes when started without --revision or --source (kit/config.py package_revisions)."""
    return " ".join(f"{k}={v}" for k, v in sorted(pins.items()))


def _buildspec() -> dict:
    out = f's3://$BUCKET/{KEY_PREFIX}/$SCHEME/$CODEBUILD_BUILD_NUMBER'
    return {
        "version": "0.2",
        "env": {"shell": "bash"},
        "phases": {
            "install": {
                "runtime-versions": {"python": BUILD_PYTHON},
                "commands": [
                    "python3 --version",
                    # PyPI serves torch's CUDA build on Linux x86_64; the CPU wheel is enough here.
                    "python3 -m pip install -q --index-url https://download.pytorch.org/whl/cpu torch==2.13.0",
                    "python3 -m pip install -q -c constraints.txt -r requirements-package.txt",
                ],
            },
            "build": {
                "commands": [
                    f'OUT="{out}"',
                    # The configured pin of the scheme's default source (-c model_revision), unless the
                    # build was started with its own --revision or another --source.
                    '[ -n "$SOURCE" ] || for p in $PINNED_REVISIONS; do '
                    '[ "${p%%=*}" != "$SCHEME" ] || REVISION=${REVISION:-${p#*=}}; done',
                    'echo "source revision: ${REVISION:-newest}"',
                    'python3 -m harness.package build --scheme "$SCHEME" --out "$OUT" --work /tmp '
                    '${SOURCE:+--source "$SOURCE"} ${REVISION:+--revision "$REVISION"}',
                    f'aws ssm put-parameter --name "{PARAMETER_PREFIX}/$SCHEME" --type String '
                    '--value "$OUT" --overwrite',
                    f'echo "published $OUT in {PARAMETER_PREFIX}/$SCHEME"',
                ],
            },
        },
    }


class PackageStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, hf_token_secret: str,
                 pinned_revisions: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.bucket = s3.Bucket(
            self, "Packages", bucket_name=bucket_name(),
            encryption=s3.BucketEncryption.S3_MANAGED, block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True, versioned=False, object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.DESTROY, auto_delete_objects=True,
            # A failed upload leaves its multipart parts stored, invisible and billed until aborted
            # (S3 User Guide, multipart upload); boto3 aborts on failure (s3transfer 0.19.3
            # tasks.py CreateMultipartUploadTask), if the role may (WritePackages), else this rule does.
            lifecycle_rules=[s3.LifecycleRule(id="AbortIncompleteUploads",
                                              abort_incomplete_multipart_upload_after=cdk.Duration.days(1))])
        nag.acknowledge(self.bucket, "AwsSolutions-S1",
                        "Packages are rebuilt from public weights; every write is one CodeBuild build, whose "
                        "log names the objects it uploaded. Access logs would need a second bucket to clean up")

        kit = s3_assets.Asset(self, "KitSource", path=str(stage_kit_source()))
        log_group = logs.LogGroup(self, "BuildLogs", log_group_name=f"/aws/codebuild/{PROJECT_NAME}",
                                  retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY)
        self.project = codebuild.Project(
            self, "Build", project_name=PROJECT_NAME,
            description="Repack Gemma 4 QAT weights into a compressed-tensors package (python -m harness.package)",
            source=codebuild.Source.s3(bucket=kit.bucket, path=kit.s3_object_key),
            environment=codebuild.BuildEnvironment(
                build_image=BUILD_IMAGE, compute_type=COMPUTE),
            environment_variables={
                "SCHEME": codebuild.BuildEnvironmentVariable(value=DEFAULT_SCHEME),
                "SOURCE": codebuild.BuildEnvironmentVariable(value=""),
                "REVISION": codebuild.BuildEnvironmentVariable(value=""),
                "PINNED_REVISIONS": codebuild.BuildEnvironmentVariable(
                    value=pinned_revisions_value(pinned_revisions or {})),
                "BUCKET": codebuild.BuildEnvironmentVariable(value=self.bucket.bucket_name),
                "HF_TOKEN": codebuild.BuildEnvironmentVariable(
                    type=codebuild.BuildEnvironmentVariableType.SECRETS_MANAGER, value=hf_token_secret),
            },
            build_spec=codebuild.BuildSpec.from_object(_buildspec()),
            timeout=BUILD_TIMEOUT,
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=log_group)),
        )
        role = self.project.role
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="WritePackages", actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
            resources=[self.bucket.arn_for_objects(f"{KEY_PREFIX}/*")]))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ListPackages", actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{KEY_PREFIX}/*"]}}))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="PublishPackageUri", actions=["ssm:PutParameter"],
            resources=[f"arn:{self.partition}:ssm:{self.region}:{self.account}:parameter{PARAMETER_PREFIX}/*"]))
        nag.acknowledge(self.project, "AwsSolutions-CB4",
                        "The build produces no CodeBuild artifacts; it writes to the kit bucket, encrypted "
                        "with SSE-S3 by default")
        project_id = self.get_logical_id(self.project.node.default_child)
        acct = "<AWS::AccountId>"
        wildcards = {
            "Action::s3:GetBucket*": "CDK's read grant on the kit-source asset bucket (the CodeBuild S3 source)",
            "Action::s3:GetObject*": "CDK's read grant on the kit-source asset (the CodeBuild S3 source)",
            "Action::s3:List*": "CDK's read grant on the kit-source asset bucket (the CodeBuild S3 source)",
            f"Resource::arn:aws:logs:{self.region}:{acct}:log-group:/aws/codebuild/<{project_id}>:*":
                "The project's own log group and its streams (CDK's default CodeBuild policy)",
            f"Resource::arn:aws:codebuild:{self.region}:{acct}:report-group/<{project_id}>-*":
                "The project's own report groups (CDK's default CodeBuild policy)",
            f"Resource::<{self.get_logical_id(self.bucket.node.default_child)}.Arn>/{KEY_PREFIX}/*":
                "Writes under package/ only; the scheme and build number are chosen at build time",
            f"Resource::arn:aws:ssm:{self.region}:{acct}:parameter{PARAMETER_PREFIX}/*":
                "Publishes /inference-kit/package/<scheme>; the scheme is chosen at build time",
        }
        for finding, reason in wildcards.items():
            nag.acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)

        cdk.CfnOutput(self, "BucketName", value=self.bucket.bucket_name)
        cdk.CfnOutput(self, "ProjectName", value=self.project.project_name)
        cdk.CfnOutput(self, "StartBuild", value=(
            f"aws codebuild start-build --project-name {PROJECT_NAME} --environment-variables-override "
            f"name=SCHEME,value={DEFAULT_SCHEME},type=PLAINTEXT"))
