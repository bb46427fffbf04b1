"""SageMakerStack: the AWS vLLM container, SM_VLLM_* env, the token never in the template,
one endpoint per instance type, a scoped role, deletion at the TTL."""
from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from kit.config import ConfigError
from stacks.sagemaker import image_uri
from tests.stacks.conftest import synth


def test_model_image_and_vllm_environment(kit):
    t = kit.template("SageMakerStack")
    t.resource_count_is("AWS::SageMaker::Model", 1)
    t.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({
        "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.31.0-gpu-py312-cu130-ubuntu24.04-sagemaker",
        "Environment": Match.object_like({
            "SM_VLLM_MODEL": "google/gemma-4-E2B-it-qat-w4a16-ct", "SM_VLLM_MAX_MODEL_LEN": "4096",
            "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",  # ml.g6.xlarge: one L4
            "SM_VLLM_ENABLE_AUTO_TOOL_CHOICE": "true", "SM_VLLM_TOOL_CALL_PARSER": "gemma4"}),
    })})


def test_hf_token_is_a_dynamic_reference_never_plain_text(kit):
    _, model = kit.one("SageMakerStack", "AWS::SageMaker::Model")
    token = model["Properties"]["PrimaryContainer"]["Environment"]["HF_TOKEN"]
    assert token == "{{resolve:secretsmanager:inference-kit/hf-token:SecretString:::}}"
    assert "hf_" not in json.dumps(kit.templates["SageMakerStack"]).replace("hf-token", "")


def test_endpoint_config_timeouts_and_ami_version(kit):
    t = kit.template("SageMakerStack")
    t.resource_count_is("AWS::SageMaker::EndpointConfig", 1)
    t.has_resource_properties("AWS::SageMaker::EndpointConfig", {"ProductionVariants": [Match.object_like({
        "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1,
        "InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1"})]})
    _, cfg = kit.one("SageMakerStack", "AWS::SageMaker::EndpointConfig")
    (v,) = cfg["Properties"]["ProductionVariants"]
    assert 60 <= v["ContainerStartupHealthCheckTimeoutInSeconds"] <= 3600
    assert 60 <= v["ModelDataDownloadTimeoutInSeconds"] <= 3600
    assert v["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"


def test_execution_role_is_scoped(kit):
    role = kit.templates["SageMakerStack"]["Resources"]["ExecutionRole605A040B"]
    assert "ManagedPolicyArns" not in role["Properties"]  # no SageMakerFullAccess, nothing managed
    policies = kit.resources("SageMakerStack", "AWS::IAM::Policy")
    (execution,) = [p for p in policies.values() if "ExecutionRole" in p["Properties"]["PolicyName"]]
    st = {s["Sid"]: s for s in execution["Properties"]["PolicyDocument"]["Statement"]}
    assert st["PullVllmImage"]["Resource"] == "arn:aws:ecr:us-east-1:763104351884:repository/vllm"
    assert st["EcrLogin"]["Action"] == "ecr:GetAuthorizationToken"
    assert st["EndpointMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}}
    # The log-group form with ":*": what IAM matches for CreateLogGroup/DescribeLogStreams, and
    # it covers the group's streams (a bare group ARN would leave CreateLogGroup denied).
    assert st["EndpointLogs"]["Resource"] == {"Fn::Join": ["", [
        "arn:aws:logs:us-east-1:", {"Ref": "AWS::AccountId"},
        ":log-group:/aws/sagemaker/Endpoints/SageMakerStack-ml-g6-xlarge:*"]]}
    assert "logs:CreateLogGroup" in st["EndpointLogs"]["Action"]
    assert "secretsmanager" not in json.dumps(execution)  # CloudFormation resolves the token, not the role
    actions = {a for s in st.values() for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not any(a.endswith("*") for a in actions)


def test_endpoint_is_deleted_at_the_ttl(kit):
    _, endpoint = kit.one("SageMakerStack", "AWS::SageMaker::Endpoint")
    assert endpoint["Properties"]["EndpointName"] == "SageMakerStack-ml-g6-xlarge"
    _, schedule = kit.one("SageMakerStack", "AWS::Scheduler::Schedule")
    p = schedule["Properties"]
    # From the TTL, every 15 min for two days: a Creating/Updating endpoint refuses deletion, so
    # one attempt is not enough (stacks/guardrails.py); calls after it is gone fail harmlessly.
    assert (p["ScheduleExpression"], p["StartDate"], p["EndDate"]) == \
        ("rate(15 minutes)", "2026-03-01T20:01:00Z", "2026-03-03T20:01:00Z")
    assert p["Target"]["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 15 * 60
    # The guard exists while the endpoint is still Creating: it does not wait for it; the endpoint
    # depends on the guard (schedule, role, policy), so CloudFormation creates the guard first and
    # deletes it only after the endpoint: "Resource A is deleted before resource B" (DependsOn
    # attribute, CloudFormation User Guide). Review R1.
    assert "DependsOn" not in schedule
    schedule_id, _ = kit.one("SageMakerStack", "AWS::Scheduler::Schedule")
    guard = {schedule_id, *[k for k, r in kit.resources("SageMakerStack", "AWS::IAM::Role").items()
                            if "TtlSchedulerRole" in k],
             *[k for k in kit.resources("SageMakerStack", "AWS::IAM::Policy") if "TtlSchedulerRole" in k]}
    assert len(guard) == 3
    assert guard <= set(endpoint.get("DependsOn", []))
    assert p["Target"]["Arn"]["Fn::Join"][1][-1] == ":scheduler:::aws-sdk:sagemaker:deleteEndpoint"
    assert json.loads(p["Target"]["Input"]) == {"EndpointName": "SageMakerStack-ml-g6-xlarge"}
    policies = kit.resources("SageMakerStack", "AWS::IAM::Policy")
    (ttl,) = [pol for pol in policies.values() if "Ttl" in pol["Properties"]["PolicyName"]]
    (stmt,) = ttl["Properties"]["PolicyDocument"]["Statement"]
    assert stmt["Action"] == "sagemaker:DeleteEndpoint"
    resource = "".join(p if isinstance(p, str) else "{}" for p in stmt["Resource"]["Fn::Join"][1])
    assert resource == "arn:aws:sagemaker:us-east-1:{}:endpoint/sagemakerstack-ml-g6-xlarge"


def test_sagemaker_outputs(kit):
    t = kit.template("SageMakerStack")
    t.has_output("EndpointName", {"Value": {"Fn::GetAtt": ["EndpointMlG6Xlarge", "EndpointName"]}})
    t.has_output("EndpointNames", {"Value": "ml.g6.xlarge=SageMakerStack-ml-g6-xlarge"})
    t.has_output("InstanceType", {"Value": "ml.g6.xlarge"})


def test_gpu_family_sweep_is_a_config_change(tmp_path):
    s = synth(tmp_path, backends="sagemaker", sagemaker_instance_types="ml.g6.xlarge,ml.g6e.12xlarge,ml.g7e.12xlarge",
              sagemaker_model="Qwen/Qwen3-Coder-30B-A3B-Instruct", sagemaker_ami_version="")
    models = s.resources("SageMakerStack", "AWS::SageMaker::Model")
    tp = {k: m["Properties"]["PrimaryContainer"]["Environment"]["SM_VLLM_TENSOR_PARALLEL_SIZE"] for k, m in models.items()}
    # ml.g7e.12xlarge carries 2 RTX PRO 6000 GPUs (the catalog's sources), not 4
    assert tp == {"ModelMlG6Xlarge": "1", "ModelMlG6E12Xlarge": "4", "ModelMlG7E12Xlarge": "2"}
    env = models["ModelMlG6Xlarge"]["Properties"]["PrimaryContainer"]["Environment"]
    assert env["SM_VLLM_MODEL"] == "Qwen/Qwen3-Coder-30B-A3B-Instruct" and env["SM_VLLM_TOOL_CALL_PARSER"] == "qwen3_coder"
    t = s.template("SageMakerStack")
    t.resource_count_is("AWS::SageMaker::Endpoint", 3)
    t.resource_count_is("AWS::Scheduler::Schedule", 3)  # each endpoint deleted at the TTL
    for cfg in s.resources("SageMakerStack", "AWS::SageMaker::EndpointConfig").values():
        assert "InferenceAmiVersion" not in cfg["Properties"]["ProductionVariants"][0]


def test_model_without_a_known_parser_gets_no_tool_flags(tmp_path):
    s = synth(tmp_path, backends="sagemaker", sagemaker_model="mistralai/Some-Model-7B")
    _, model = s.one("SageMakerStack", "AWS::SageMaker::Model")
    assert not any("TOOL" in k for k in model["Properties"]["PrimaryContainer"]["Environment"])


def test_instance_type_without_gpu_count_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="ml.p4d.24xlarge.*known: ml.g5.xlarge"):
        synth(tmp_path, backends="sagemaker", sagemaker_instance_types="ml.p4d.24xlarge")


@pytest.mark.parametrize("region,account,domain", [
    ("us-east-1", "763104351884", "amazonaws.com"), ("ap-east-1", "871362719292", "amazonaws.com"),
    ("me-central-1", "914824155844", "amazonaws.com"), ("cn-north-1", "727897471807", "amazonaws.com.cn"),
])
def test_registry_account_per_region(region, account, domain):
    assert image_uri(region, "t") == f"{account}.dkr.ecr.{region}.{domain}/vllm:t"
