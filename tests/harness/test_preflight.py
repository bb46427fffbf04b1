"""Preflight on moto (real per-region offerings), with the quota and Bedrock calls injected."""
from __future__ import annotations

import json

import boto3
import pytest

from harness.account import preflight
from kit.config import DEFAULTS
from kit.image_facts import IMAGE_PARAMETERS, PARENT_PARAMETERS
from tests.harness.aws_replay import FAKE_HF_TOKEN, ecr_images, secret_values, ssm_parameters

# Every image parameter a deploy reads, resolved: the kit's images already built.
BUILT = {n: "ami-0123456789abcdef0" for n in [*IMAGE_PARAMETERS.values(), *PARENT_PARAMETERS.values()]}


def kit_ami(region: str = "us-east-1") -> str:
    """An AMI of this account in moto, as a pipeline's distribution leaves it (preflight checks
    that the AMI a kit image parameter names exists)."""
    return boto3.client("ec2", region_name=region).register_image(
        Name="inference-kit-image-2026-12-01T09-00-00.000Z", Architecture="x86_64", RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 150}}])["ImageId"]


def ready(region: str = "us-east-1"):
    """SSM, ECR and Secrets Manager as in an account where the kit's images are built (their AMIs
    registered in ``region``, in moto), the DLC tag exists and the token secret holds a token."""
    built = {**BUILT, **{n: kit_ami(region) for n in IMAGE_PARAMETERS.values()}}
    return {"ssm": ssm_parameters(built), "ecr": ecr_images({DEFAULTS["sagemaker_vllm_tag"]}),
            "secrets": secret_values({DEFAULTS["hf_token_secret"]: FAKE_HF_TOKEN})}


class FakeBedrock:
    def __init__(self, **status):
        self.status = {"regionAvailability": "AVAILABLE", "authorizationStatus": "AUTHORIZED",
                       "entitlementAvailability": "AVAILABLE", **status}
        self.asked = []

    def get_foundation_model_availability(self, modelId):
        self.asked.append(modelId)
        return {"modelId": modelId, **self.status}


def _quota(values):
    return lambda service, code: values.get(code)


@pytest.fixture()
def cdk_json(tmp_path):
    """A cdk.json of the repo's shape, so the tests do not depend on the checked-in defaults."""
    p = tmp_path / "cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {
        "region": "us-east-1", "backends": "bedrock,sagemaker,g6,g5g,inf2,trn1"}}))
    return ["--cdk-json", str(p)]


def _bootstrap(region):
    boto3.client("ssm", region_name=region).put_parameter(
        Name=preflight.BOOTSTRAP_PARAM, Value="27", Type="String")


def test_all_ready_in_us_east_1(aws, cdk_json, capsys):
    _bootstrap("us-east-1")
    bedrock = FakeBedrock()
    rc = preflight.main(["--region", "us-east-1", *cdk_json], session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 64, "L-1945791B": 8, "L-2C3B7624": 8}),
                        sagemaker_quota=lambda t: 1.0, bedrock=bedrock, **ready())
    out = capsys.readouterr().out
    assert rc == 0, out
    assert bedrock.asked == ["amazon.nova-micro-v1:0"]
    assert "us-east-1a" in out and "g5g.2xlarge offered" in out
    for b in ("bedrock", "sagemaker", "g6", "g5g", "inf2", "trn1"):
        assert f"{b:<10} ready" in out


def test_g5g_not_offered_in_us_east_2_blocks_only_g5g(aws, cdk_json, capsys):
    _bootstrap("us-east-2")
    rc = preflight.main(["--region", "us-east-2", "--backends", "g6,g5g", *cdk_json],
                        session=boto3.Session(region_name="us-east-2"),
                        quota=_quota({"L-DB2E81BA": 64}), **ready("us-east-2"))
    out = capsys.readouterr().out
    assert rc == 1
    assert "g5g.2xlarge is not offered in us-east-2" in out
    assert "g5g        blocked" in out and "g6         ready" in out


def test_quota_summed_over_selected_stacks(aws, cdk_json, capsys):
    _bootstrap("us-east-1")
    # g6.xlarge (4) + g5g.2xlarge (8) = 12 G vCPUs needed, 8 allowed: both G backends blocked.
    rc = preflight.main(["--region", "us-east-1", "--backends", "g6,g5g,inf2", *cdk_json],
                        session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 8, "L-1945791B": 4}), **ready())
    out = capsys.readouterr().out
    assert rc == 1
    assert "= 8 vCPUs, selected stacks need 12" in out
    assert "g6         blocked" in out and "inf2       ready" in out


def test_zero_quota_and_unreadable_quota(aws, cdk_json, capsys):
    _bootstrap("us-east-1")
    rc = preflight.main(["--region", "us-east-1", "--backends", "trn1,inf2", *cdk_json],
                        session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-2C3B7624": 0}), **ready())
    out = capsys.readouterr().out
    assert rc == 1
    assert "trn1       blocked" in out
    assert "inf2       ready (with warnings)" in out and "could not read" in out


def test_no_bootstrap_and_bedrock_not_entitled_block(aws, cdk_json, capsys):
    rc = preflight.main(["--region", "us-east-1", "--backends", "bedrock", *cdk_json],
                        session=boto3.Session(region_name="us-east-1"),
                        bedrock=FakeBedrock(entitlementAvailability="NOT_AVAILABLE"))
    out = capsys.readouterr().out
    assert rc == 1
    assert "not bootstrapped" in out and "no entitlement" in out


def test_no_credentials_blocks(monkeypatch, tmp_path, cdk_json, capsys):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    rc = preflight.main(["--region", "us-east-1", "--backends", "g6", *cdk_json],
                        session=boto3.Session(region_name="us-east-1"))
    out = capsys.readouterr().out
    assert rc == 1 and "no usable AWS credentials" in out


def test_configured_az_and_instance_overrides_are_what_is_checked(aws, cdk_json, capsys):
    _bootstrap("us-east-1")
    # trn1.2xlarge is offered only in us-east-1c and -1f; the config launches it in us-east-1a.
    rc = preflight.main(["--backends", "trn1,sagemaker,g5g", *cdk_json, "-c", "azs=us-east-1a,us-east-1c",
                         "-c", "trn1_az=us-east-1a", "-c", "g5g_instance_type=g5g.4xlarge",
                         "-c", "sagemaker_instance_types=ml.g6.xlarge,ml.g5.xlarge"],
                        session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 64, "L-2C3B7624": 8}),
                        sagemaker_quota=lambda t: {"ml.g6.xlarge": 1.0, "ml.g5.xlarge": 0.0}[t], **ready())
    out = capsys.readouterr().out
    assert rc == 1
    # The same words the deploy's AZ choice would fail with (stacks/lambdas/az_choice/index.py).
    assert ("us-east-1a does not offer trn1.2xlarge in this account; AZs that do: us-east-1c, us-east-1f "
            "(set -c trn1_az to one of them, or drop it)") in out
    assert "g5g.4xlarge offered" in out and "g5g.2xlarge" not in out
    assert "; the deploy will use us-east-1a" in out  # g5g: the first AZ offering g5g.4xlarge
    assert "ml.g6.xlarge for endpoint usage = 1" in out and "'ml.g5.xlarge for endpoint usage' = 0" in out
    assert "sagemaker  blocked" in out and "g5g        ready" in out


@pytest.mark.parametrize("argv,needle", [
    (["--backends", "g6,h100"], "--backends: unknown backend 'h100'; valid: bedrock, sagemaker, g6, g5g, inf2, trn1"),
    (["-c", "g6_instance_type=banana"], "g6_instance_type"),
    (["-c", "novalue"], "-c 'novalue': expected KEY=VALUE"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, cdk_json, capsys):
    assert preflight.main([*argv, *cdk_json]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_gpu_family_sweep_checks_each_types_quota(aws, cdk_json, capsys):
    _bootstrap("us-east-1")
    quotas = {"ml.g5.xlarge": 1.0, "ml.g6.xlarge": 1.0, "ml.g6e.xlarge": 0.0, "ml.g7e.2xlarge": 1.0}
    rc = preflight.main(["--backends", "sagemaker", *cdk_json,
                         "-c", "sagemaker_instance_types=" + ",".join(quotas)],
                        session=boto3.Session(region_name="us-east-1"), sagemaker_quota=lambda t: quotas[t], **ready())
    out = capsys.readouterr().out
    assert rc == 1
    for t in ("ml.g5.xlarge", "ml.g6.xlarge", "ml.g7e.2xlarge"):
        assert f"{t} for endpoint usage = 1" in out
    assert "'ml.g6e.xlarge for endpoint usage' = 0" in out
