"""Discovery: moto CloudFormation stack outputs, a cdk outputs file, --endpoint parsing."""
from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from harness import discovery as disc
from tests.harness.fake_openai import SCRIPTS, FakeOpenAI

G6 = {"BackendId": "g6", "Service": "ec2", "Region": "us-east-1", "ModelId": "google/gemma-4-E2B-it-qat-w4a16-ct",
      "InstanceType": "g6.xlarge", "InstanceId": "i-0123456789abcdef0", "Port": "8000", "SshUser": "ubuntu",
      "TtlExpiresAt": "disabled", "IdleStopMinutes": "60", "ModelRevision": "unpinned"}
SM = {"BackendId": "sagemaker", "Service": "sagemaker", "Region": "us-east-1", "ModelId": "google/gemma-4-E2B-it-qat-w4a16-ct",
      "InstanceType": "ml.g6.xlarge", "EndpointName": "kit-sagemaker-g6", "EndpointNames": "ml.g6.xlarge=kit-sagemaker-g6"}
BR = {"BackendId": "bedrock", "Service": "bedrock", "Region": "us-east-1", "ModelId": "us.amazon.nova-micro-v1:0",
      "InstanceType": "managed", "ModelArn": "arn:aws:bedrock:us-east-1::inference-profile/x"}


def _template(outputs: dict) -> str:
    return json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                       "Outputs": {k: {"Value": v} for k, v in outputs.items()}})


def _check(d: disc.Discovery) -> None:
    by = {e.name: e for e in d.endpoints}
    assert set(by) == {"g6", "sagemaker", "bedrock"}
    g6 = by["g6"]
    assert (g6.protocol, g6.instance_id, g6.port, g6.ssh_user, g6.base_url) == ("openai", "i-0123456789abcdef0", 8000, "ubuntu", None)
    assert g6.tool_calls and g6.instance_type == "g6.xlarge" and g6.stack_name == "G6Stack"
    assert (by["sagemaker"].protocol, by["sagemaker"].endpoint_name) == ("sagemaker", "kit-sagemaker-g6")
    assert (by["bedrock"].protocol, by["bedrock"].model_id, by["bedrock"].instance_type) == \
        ("bedrock", "us.amazon.nova-micro-v1:0", None)
    # protocol: how the harness speaks; service: what bills (the stack's Service output)
    assert {n: (e.protocol, e.service) for n, e in by.items()} == \
        {"g6": ("openai", "ec2"), "sagemaker": ("sagemaker", "sagemaker"), "bedrock": ("bedrock", "bedrock")}
    assert "inf2: Inf2Stack not deployed" in d.notes


def test_discovery_from_cloudformation_on_moto(fake_aws):
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-east-1")
        for name, out in (("G6Stack", G6), ("SageMakerStack", SM), ("BedrockStack", BR), ("NetworkStack", {"VpcId": "v"})):
            cfn.create_stack(StackName=name, TemplateBody=_template(out))
        _check(disc.from_cloudformation(cfn, "us-east-1"))
        only = disc.from_cloudformation(cfn, "us-east-1", backends=["g6"])
        assert [e.name for e in only.endpoints] == ["g6"] and only.notes == []


def test_discovery_from_outputs_file(tmp_path):
    f = tmp_path / "cdk-outputs.json"
    f.write_text(json.dumps({"G6Stack": G6, "SageMakerStack": SM, "BedrockStack": BR, "NetworkStack": {"VpcId": "v"}}))
    _check(disc.from_outputs(disc.load_outputs_file(f), "us-east-1"))


@pytest.mark.parametrize("content,msg", [
    ("not json", "not JSON"),
    ('["G6Stack"]', "expected {StackName: {OutputKey: value}}"),
    (json.dumps({"G6Stack": {**G6, "Port": None}}), "output 'Port' missing"),
    (json.dumps({"G6Stack": {**G6, "Service": "lambda"}}), "Service output 'lambda' is not one of"),
])
def test_bad_outputs_file_is_one_line(tmp_path, content, msg):
    f = tmp_path / "o.json"
    f.write_text(content)
    with pytest.raises(disc.DiscoveryError, match=msg.replace("{", r"\{").replace("}", r"\}")):
        disc.from_outputs(disc.load_outputs_file(f), "us-east-1")


def test_endpoint_args_and_model_probe():
    with FakeOpenAI(SCRIPTS["good"], model="served/model-x") as srv:
        url = f"http://127.0.0.1:{srv.port}"  # no /v1: appended
        [ep] = disc.from_endpoint_args([f"laptop={url}"])
        assert (ep.name, ep.protocol, ep.service, ep.base_url, ep.model_id, ep.tool_calls) == \
            ("laptop", "openai", None, url + "/v1", "served/model-x", True)
        [ep] = disc.from_endpoint_args([f"laptop={url}/v1/"], ["laptop=other/model"], ["laptop"])
        assert ep.model_id == "other/model" and not ep.tool_calls
    for bad in ["laptop", "=http://x", "laptop=ftp://x", "a b=http://x"]:
        with pytest.raises(disc.DiscoveryError, match="expected NAME=URL"):
            disc.parse_endpoint_arg(bad)
    with pytest.raises(disc.DiscoveryError, match="pass --model"):
        disc.probe_model_id("http://127.0.0.1:9/v1", timeout=2)


def test_region_resolution(tmp_path):
    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"context": {"region": "eu-west-1"}}))
    assert disc.resolve_region("ap-south-1", {"AWS_REGION": "us-west-2"}, cdk) == "ap-south-1"
    # The shell's region is not the kit's (kit/regions.py): cdk deploy follows cdk.json.
    assert disc.resolve_region(None, {"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "x"}, cdk) == "eu-west-1"
    assert disc.resolve_region(None, {}, cdk) == "eu-west-1"
    assert disc.resolve_region(None, {}, tmp_path / "missing.json") == "us-east-1"


def test_ttl_notes():
    now = 1_800_000_000  # 2027-01-15T08:00:00Z
    assert disc.ttl_note("g6", {"TtlExpiresAt": "disabled"}, now) is None
    assert disc.ttl_note("g6", {"TtlExpiresAt": "2027-01-15T12:00:00Z"}, now) is None
    assert "in 20 min" in disc.ttl_note("g6", {"TtlExpiresAt": "2027-01-15T08:20:00Z"}, now)
    assert "passed" in disc.ttl_note("g6", {"TtlExpiresAt": "2027-01-15T07:00:00Z"}, now)


def test_two_runs_in_the_same_second_get_their_own_directories(tmp_path):
    from harness.results import new_run_dir

    dirs = [new_run_dir(tmp_path / "results") for _ in range(3)]
    assert len({d.name for d in dirs}) == 3 and all(d.is_dir() and not any(d.iterdir()) for d in dirs)


# EC2's capacity error as CloudFormation shows it in the instance's CREATE_FAILED event (the
# wording of RunInstances' InsufficientInstanceCapacity message: the AZ asked for in parentheses,
# the AZs that have capacity after "choosing").
CAPACITY = ("Resource handler returned message: \"We currently do not have sufficient trn1.2xlarge capacity in the "
            "Availability Zone you requested (us-east-1c). Our system will be working on provisioning additional "
            "capacity. You can currently get trn1.2xlarge capacity by not specifying an Availability Zone in your "
            "request or choosing us-east-1f. (Service: Ec2, Status Code: 500, Request ID: x)\" "
            "(HandlerErrorCode: GeneralServiceException)")


def test_a_capacity_shortage_is_one_line_saying_what_to_do():
    events = [{"ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": "Resource creation cancelled"},
              {"ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": CAPACITY}]
    hint = disc.capacity_hint("trn1", events)
    assert hint == ("EC2 had no trn1.2xlarge capacity in us-east-1c; deploy again with -c trn1_az=us-east-1f "
                    "(EC2 suggests us-east-1f)")
    bare = [{"ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": "InsufficientInstanceCapacity"}]
    assert "-c trn1_az=<another AZ that offers it>" in disc.capacity_hint("trn1", bare)
    assert disc.capacity_hint("trn1", [{"ResourceStatusReason": "AccessDenied"}]) is None


def test_a_failed_stack_note_carries_the_capacity_hint():
    class Cfn:
        def describe_stacks(self, StackName):
            if StackName != "Trn1Stack":
                from botocore.exceptions import ClientError
                raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack {StackName} does not exist"}},
                                  "DescribeStacks")
            return {"Stacks": [{"StackStatus": "ROLLBACK_COMPLETE"}]}

        def describe_stack_events(self, StackName):
            return {"StackEvents": [{"ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": CAPACITY}]}

        def list_stacks(self, **_):  # variant stacks (kit/variants.py): none here
            return {"StackSummaries": [{"StackName": "Trn1Stack"}]}

    d = disc.from_cloudformation(Cfn(), "us-east-1", ["trn1"])
    assert d.notes == ["trn1: Trn1Stack is ROLLBACK_COMPLETE, skipped: EC2 had no trn1.2xlarge capacity in "
                       "us-east-1c; deploy again with -c trn1_az=us-east-1f (EC2 suggests us-east-1f)"]


def test_gpu_family_sweep_is_one_endpoint_per_type():
    types = ["ml.g5.xlarge", "ml.g6.xlarge", "ml.g6e.xlarge", "ml.g7e.2xlarge"]
    names = {t: "SageMakerStack-" + t.replace(".", "-") for t in types}
    sweep = {**SM, "InstanceType": types[0], "EndpointName": names[types[0]],
             "EndpointNames": ",".join(f"{t}={n}" for t, n in names.items())}
    d = disc.from_outputs({"SageMakerStack": sweep}, backends=["sagemaker"])
    got = {e.name: (e.endpoint_name, e.instance_type) for e in d.endpoints}
    assert got == {"sagemaker@g5-xlarge": (names["ml.g5.xlarge"], "ml.g5.xlarge"),
                   "sagemaker@g6-xlarge": (names["ml.g6.xlarge"], "ml.g6.xlarge"),
                   "sagemaker@g6e-xlarge": (names["ml.g6e.xlarge"], "ml.g6e.xlarge"),
                   "sagemaker@g7e-2xlarge": (names["ml.g7e.2xlarge"], "ml.g7e.2xlarge")}
    # one type: the endpoint keeps the backend's own name, as before
    assert [e.name for e in disc.from_outputs({"SageMakerStack": SM}, backends=["sagemaker"]).endpoints] == ["sagemaker"]
