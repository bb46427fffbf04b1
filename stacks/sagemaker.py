"""SageMakerStack: the AWS vLLM container on a real-time endpoint, one endpoint per instance type.

Per instance type (``sagemaker_instance_types``; default ml.g6.xlarge): a model, an endpoint
config (startup-health and download timeouts, ``InferenceAmiVersion`` when configured) and an
endpoint, deleted at its TTL.

Catalog facts read (kit/catalog.py): the instance's GPU count (``INSTANCES[...].accelerators``,
the tensor-parallel size) and the model's tool-call parser (``tool_call_parser``).

Hugging Face token: the container reads ``HF_TOKEN`` from its environment and cannot take a
secret ARN, so the model's environment holds a CloudFormation dynamic reference
``{{resolve:secretsmanager:<name>:SecretString:::}}``. The template, cdk.out and the stack
events never contain the token; CloudFormation resolves it at deploy time with the deployer's
credentials. The resolved value does end up in the SageMaker model definition, readable by
anyone allowed ``sagemaker:DescribeModel`` in the account: use a read-only, fine-grained HF
token. (Alternatives weighed in docs/stacks.md.) The execution role therefore needs no access to
the secret and gets none.

No VPC for the model: the container downloads the weights from Hugging Face at start-up and the
kit has no NAT gateway; the endpoint is reached only through the SageMaker API (IAM). No KMS key
on the endpoint config: ml.g5/g6/g6e carry local NVMe, for which SageMaker rejects a volume key
(the instance store is encrypted by the platform).
"""
from __future__ import annotations

import re
from datetime import datetime

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kit.catalog import INSTANCES, tool_call_parser
from stacks import nag
from kit.config import BackendConfig, KitConfig
from stacks.endpoint_ready import EndpointReady
from stacks.guardrails import EndpointTtl
from stacks.image_guard import ImagesReady
from stacks.outputs import add_outputs
from stacks import package
from stacks.sizing import sizing
from kit.weights import UNPINNED
from kit.dlc import DLC_ACCOUNT, DLC_ACCOUNT_BY_REGION, VLLM_REPOSITORY, dlc_account, image_uri  # noqa: F401

# Seconds; SageMaker accepts 60-3600. The container downloads the weights from Hugging Face at
# start-up, inside the health-check window (~9 minutes to InService in the seed).
STARTUP_HEALTH_CHECK_TIMEOUT_S = 1800
MODEL_DATA_DOWNLOAD_TIMEOUT_S = 1800


def vllm_environment(model_id: str, max_model_len: int, gpus: int, revision: str | None = None) -> dict[str, str]:
    """SM_VLLM_FOO_BAR=value becomes `--foo-bar value` in the container: the DLC's entrypoint
    strips SM_VLLM_, lowercases, turns `_` into `-` and appends a non-empty value after the flag
    (aws/deep-learning-containers vllm/build_artifacts/sagemaker_entrypoint.sh at cb035a10; its
    successor scripts/docker/vllm/sagemaker_args.py at dceae13291 does the same for a value that is
    not a JSON array or object, and `true` still gives the bare flag), so
    SM_VLLM_TENSOR_PARALLEL_SIZE is vLLM's --tensor-parallel-size (vllm/engine/arg_utils.py).

    ``revision`` (a commit, kit/weights.py): SM_VLLM_REVISION and SM_VLLM_TOKENIZER_REVISION, so
    vLLM's --revision and --tokenizer-revision, ModelConfig's ``revision`` ("The specific model
    version to use. It can be a branch name, a tag name, or a commit id") and
    ``tokenizer_revision`` (vllm-project/vllm vllm/config/model.py at 0052a5b8): the container
    downloads that commit of the weights and of the tokenizer, not the newest."""
    env = {
        "SM_VLLM_MODEL": model_id,
        "SM_VLLM_MAX_MODEL_LEN": str(max_model_len),
        "SM_VLLM_TENSOR_PARALLEL_SIZE": str(gpus),
    }
    if revision:
        env["SM_VLLM_REVISION"] = env["SM_VLLM_TOKENIZER_REVISION"] = revision
    parser = tool_call_parser(model_id)
    if parser:
        env["SM_VLLM_ENABLE_AUTO_TOOL_CHOICE"] = "true"
        env["SM_VLLM_TOOL_CALL_PARSER"] = parser
    return env


def endpoint_name(stack_name: str, instance_type: str) -> str:
    name = re.sub(r"[^A-Za-z0-9-]", "-", f"{stack_name}-{instance_type}")
    return name[:63].rstrip("-")


class SageMakerStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, backend: BackendConfig, config: KitConfig,
                 ttl_expires_at: datetime | None, checked_at: str = "", **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Before anything billable: every configured machine image exists (stacks/image_guard.py),
        # so a deploy of all backends cannot bring this endpoint up and then fail on a missing image.
        self.images_ready = ImagesReady(self, "ImagesReady", config=config, own=None, checked_at=checked_at)
        region = backend.region or config.region
        registry = dlc_account(region)
        self.role = iam.Role(self, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                             description="SageMaker endpoint: pull the vLLM image, write its logs and metrics")
        self.role.add_to_policy(iam.PolicyStatement(
            sid="PullVllmImage",
            actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
            resources=[f"arn:{self.partition}:ecr:{region}:{registry}:repository/{VLLM_REPOSITORY}"]))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="EndpointMetrics", actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}}))

        # A package (stacks/package.py): uncompressed S3 model data under /opt/ml/model, served as
        # "package:<scheme>"; the role reads that scheme's prefix only.
        scheme = package.check_backend(backend.id, backend.model_id)
        model_id = f"{package.MODEL_WORD}:{scheme}" if scheme else backend.model_id
        model_data = None
        if scheme:
            uri = ssm.StringParameter.value_for_string_parameter(self, package.parameter_name(scheme))
            model_data = sagemaker.CfnModel.ModelDataSourceProperty(
                s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                    s3_uri=cdk.Fn.join("", [uri, "/"]), s3_data_type="S3Prefix", compression_type="None"))
            for st in package.read_statements(scheme):
                self.role.add_to_policy(st)
            package.acknowledge_read(self.role, scheme)
        token = cdk.SecretValue.secrets_manager(config.hf_token_secret).unsafe_unwrap()
        self.endpoints: dict[str, sagemaker.CfnEndpoint] = {}
        # cdk deploy waits for InService at most sagemaker_ready_minutes (stacks/endpoint_ready.py).
        self.ready = EndpointReady(self, "Ready", endpoint_names=[endpoint_name(self.stack_name, t)
                                                                 for t in backend.instance_types])
        log_groups = []
        for itype in backend.instance_types:
            spec = INSTANCES[itype]  # kit.config refused a type without a GPU count (the catalog's rule)
            # The model's needs on this type (kit/fit.py): TP degree, longer start-up windows for
            # bigger weights; a type that cannot hold it is refused naming one that can.
            size = sizing(backend.id, itype, package.source_model(scheme) if scheme else backend.model_id,
                          config.max_model_len, backend.instance_key("sagemaker"),
                          lambda best: backend.instance_fix("sagemaker", best))
            sid = re.sub(r"[^A-Za-z0-9]", "", itype.title())
            name = endpoint_name(self.stack_name, itype)
            model = sagemaker.CfnModel(
                self, f"Model{sid}", execution_role_arn=self.role.role_arn,
                primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                    image=image_uri(region, config.sagemaker_vllm_tag), model_data_source=model_data,
                    # a package is read from /opt/ml/model: its source commit is the build's (stacks/package.py)
                    environment={**vllm_environment(package.source_model(scheme) if scheme else backend.model_id,
                                                    config.max_model_len, size.tp or spec.accelerators,
                                                    None if scheme else backend.model_revision),
                                 **({"SM_VLLM_MODEL": "/opt/ml/model", "SM_VLLM_SERVED_MODEL_NAME": model_id}
                                    if scheme else {}),
                                 "HF_TOKEN": token}))
            variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name="AllTraffic", model_name=model.attr_model_name, instance_type=itype,
                initial_instance_count=1, initial_variant_weight=1,
                container_startup_health_check_timeout_in_seconds=size.startup_seconds(STARTUP_HEALTH_CHECK_TIMEOUT_S),
                model_data_download_timeout_in_seconds=size.startup_seconds(MODEL_DATA_DOWNLOAD_TIMEOUT_S),
                inference_ami_version=config.sagemaker_ami_version or None)
            endpoint_config = sagemaker.CfnEndpointConfig(self, f"EndpointConfig{sid}", production_variants=[variant])
            model.node.add_dependency(self.images_ready.resource)
            endpoint_config.node.add_dependency(self.images_ready.resource)
            endpoint = sagemaker.CfnEndpoint(self, f"Endpoint{sid}", endpoint_name=name,
                                             endpoint_config_name=endpoint_config.attr_endpoint_config_name)
            endpoint.node.add_dependency(self.role)  # its policy (ECR pull, logs) exists before the endpoint starts
            self.endpoints[itype] = endpoint
            log_groups.append(f"arn:{self.partition}:logs:{region}:{self.account}:log-group:/aws/sagemaker/Endpoints/{name}")
            # SageMaker writes the endpoint's logs to /aws/sagemaker/Endpoints/<name> and would create
            # the group itself, never expiring and outside the stack; made here (before the
            # endpoint, deleted after it) it has a retention and goes with the stack.
            endpoint_logs = logs.LogGroup(self, f"Logs{sid}", log_group_name=f"/aws/sagemaker/Endpoints/{name}",
                                          retention=logs.RetentionDays.ONE_MONTH,
                                          removal_policy=cdk.RemovalPolicy.DESTROY)
            endpoint.node.add_dependency(endpoint_logs)
            ttl = None
            if ttl_expires_at is not None:
                # The endpoint depends on its guard (DependsOn on the schedule, its role and policy):
                # the guard is created before the endpoint, so it exists while the endpoint is
                # Creating (and billing), and CloudFormation deletes the endpoint before the guard
                # ("Resource A is deleted before resource B", DependsOn attribute, CloudFormation
                # User Guide). What this does not buy on a rollback: when the endpoint's deletion
                # fails, CloudFormation still deletes what it depended on
                # (aws-cloudformation/cloudformation-coverage-roadmap#852, #1508); docs/stacks.md.
                ttl = EndpointTtl(self, f"Ttl{sid}", endpoint_name=name, ttl_expires_at=ttl_expires_at)
                endpoint.node.add_dependency(ttl)
                # Kept on stack delete, the guard is deleted by this resource once the endpoint is gone.
                endpoint.node.add_dependency(self.ready.release(self, sid, name, ttl))
            # Beside the endpoint, not after it: the bound counts from when creation starts. Given the
            # guard, a Creating endpoint at the bound has its TTL schedule started at once.
            self.ready.wait(f"Ready{sid}", name, config.sagemaker_ready_minutes, ttl).node.add_dependency(endpoint_config)
        # IAM matches log-group actions (CreateLogGroup, DescribeLogStreams) against the group's
        # ARN with a trailing ":*" (CloudWatch Logs API reference, LogGroup.arn); the bare ARN
        # would allow only the stream actions. "<group>:*" covers the group and its streams.
        self.role.add_to_policy(iam.PolicyStatement(
            sid="EndpointLogs", actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                                         "logs:DescribeLogStreams"],
            resources=[f"{g}:*" for g in log_groups]))
        reason = ("ecr:GetAuthorizationToken and cloudwatch:PutMetricData support no resource ARN "
                  "(PutMetricData is pinned to the SageMaker namespace by a condition)")
        nag.acknowledge(self.role, "AwsSolutions-IAM5[Resource::*]", reason)
        for g in log_groups:  # cdk-nag names each wildcard resource, the account as a placeholder
            shown = g.replace(self.account, "<AWS::AccountId>")
            nag.acknowledge(self.role, f"AwsSolutions-IAM5[Resource::{shown}:*]",
                            "The endpoint's own log group in the form IAM needs for log-group actions; "
                            "SageMaker names the log streams inside it")

        first = backend.instance_types[0]
        add_outputs(self, backend_id=backend.id, service="sagemaker", model_id=model_id,
                    instance_type=first, ttl_expires_at=ttl_expires_at, idle_stop_minutes=0,
                    variant=backend.variant,
                    EndpointName=self.endpoints[first].attr_endpoint_name,
                    EndpointNames=",".join(f"{t}={endpoint_name(self.stack_name, t)}" for t in backend.instance_types),
                    ModelRevision=backend.model_revision or UNPINNED)
