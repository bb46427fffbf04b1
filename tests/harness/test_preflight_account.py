"""Preflight in a fresh account: every quota, offering, image tag and parameter
that would stop a deploy is one BLOCK line ending in its fix.

Sources of the responses: EC2 offerings, instance types and images from moto (its per-region
offering data); SSM GetParameters, ECR BatchGetImage and Service Quotas replayed through a real
botocore client with Stubber (tests/harness/aws_replay.py), which validates each response against
botocore's service model.
"""
from __future__ import annotations

import json
import re

import boto3
import pytest

from harness.account import preflight, preflight_fresh as account
from kit.config import DEFAULTS
from kit.dlc import DLC_ACCOUNT_BY_REGION
from kit.image_facts import GPU_DLAMI, IMAGE_PARAMETERS, NEURON_DLAMI, PARENT_PARAMETERS
from tests.harness.aws_replay import FAKE_HF_TOKEN, Error, Replay, ecr_images, secret_values, ssm_parameters

TAG = DEFAULTS["sagemaker_vllm_tag"]
PUBLIC = {n: "ami-0aaaaaaaaaaaaaaaa" for n in PARENT_PARAMETERS.values()}  # the DLAMIs, no kit image


@pytest.fixture()
def cdk_json(tmp_path):
    p = tmp_path / "cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {"region": "us-east-1"}}))
    return ["--cdk-json", str(p)]


def quotas(values: dict[str, float]) -> Replay:
    """GetServiceQuota for the EC2 codes in ``values``; others: NoSuchResourceException."""
    def handler(op, params):
        code = params["QuotaCode"]
        if code not in values:
            return Error("NoSuchResourceException", f"The request failed because the specified service "
                         f"quota {code} does not exist.")
        from kit.codebuild import CONCURRENT_BUILD_QUOTAS

        name = next((n for c, n in [*account.EC2_QUOTAS.values(), *CONCURRENT_BUILD_QUOTAS.values()] if c == code), code)
        service = {"ec2": "Amazon Elastic Compute Cloud (Amazon EC2)", "codebuild": "AWS CodeBuild"}[params["ServiceCode"]]
        return {"Quota": {"ServiceCode": params["ServiceCode"], "ServiceName": service,
                          "QuotaCode": code, "QuotaName": name, "Value": values[code], "Unit": "None",
                          "Adjustable": True, "GlobalQuota": False}}
    return Replay("service-quotas", handler)


def sagemaker_quotas(values: dict[str, tuple[float, str]]) -> Replay:
    """ListServiceQuotas for sagemaker: '<type> for endpoint usage' with its value and code."""
    def handler(op, params):
        assert op == "list_service_quotas" and params == {"ServiceCode": "sagemaker"}, (op, params)
        return {"Quotas": [{"ServiceCode": "sagemaker", "QuotaCode": code, "QuotaName": f"{t} for endpoint usage",
                            "Value": v, "Unit": "None", "Adjustable": True, "GlobalQuota": False}
                           for t, (v, code) in values.items()]}
    return Replay("service-quotas", handler)


def run(argv, capsys, *, sq, ssm, ecr, region="us-east-1", sm=None, secrets=None):
    _bootstrap(region)
    session = boto3.Session(region_name=region)
    finder = preflight.sagemaker_quota_finder(sm) if sm else (lambda t: 1.0)
    secrets = secrets or secret_values({DEFAULTS["hf_token_secret"]: FAKE_HF_TOKEN})
    rc = preflight.main(argv, session=session, quota=preflight.service_quota_getter(sq),
                        sagemaker_quota=finder, ssm=ssm, ecr=ecr, secrets=secrets)
    return rc, capsys.readouterr().out


def _bootstrap(region):
    boto3.client("ssm", region_name=region).put_parameter(Name=preflight.BOOTSTRAP_PARAM, Value="27", Type="String",
                                                          Overwrite=True)


def rows(out, status):
    return [line for line in out.splitlines() if re.search(rf"\s{status}\s", line)]


def test_fresh_account_every_block_names_its_fix(aws, cdk_json, capsys):
    """Nothing built, the default On-Demand Standard quota (5 vCPUs), no G quota, the DLC tag
    missing, no ml.g6.xlarge endpoint quota."""
    sm = sagemaker_quotas({"ml.g6.xlarge": (0.0, "L-D470D954")})
    rc, out = run(["--backends", "sagemaker,g5g,inf2", *cdk_json], capsys,
                  sq=quotas({"L-1216C47A": 5.0, "L-DB2E81BA": 0.0, "L-1945791B": 8.0}),
                  ssm=ssm_parameters(PUBLIC), ecr=ecr_images(set()), sm=sm)
    assert rc == 1
    blocks = rows(out, "BLOCK")
    assert blocks and all("fix: " in line for line in blocks), out
    # the sm_75 build host: c7g.8xlarge is 32 vCPUs (DescribeInstanceTypes), the Standard quota 5
    assert ("'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' (L-1216C47A) = 5 vCPUs, the "
            "vllm-sm75 build host c7g.8xlarge needs 32; fix: aws service-quotas request-service-quota-increase "
            "--service-code ec2 --quota-code L-1216C47A --desired-value 32 --region us-east-1") in out
    # the g5g instance and the sm_75 test host both need G vCPUs
    assert "--quota-code L-DB2E81BA --desired-value 8 --region us-east-1" in out
    # the kit images are not built: the commands that build them, in order
    assert ("image vllm-sm75 not built in us-east-1 (/imagebuilder/inference-kit/ami/vllm-sm75 missing); fix: "
            "python -m harness images build vllm-sm75 --region us-east-1") in out
    assert "image neuron not built in us-east-1" in out and "python -m harness images build neuron --region" in out
    # the build subnet: one AZ must offer c7g.8xlarge, c7g.16xlarge and g5g.2xlarge together (moto's data)
    assert "us-east-1a, us-east-1b, us-east-1c, us-east-1d offer c7g.8xlarge, c7g.16xlarge, g5g.2xlarge" in out
    # neuron: the inf2.xlarge backend is 4 vCPUs, the Inf quota 8; the image's build host, an
    # inf2.8xlarge (the compile's host memory: ami/neuron/boot_budget.py), is 32
    assert "vCPU quota L-1945791B        ok      8 vCPUs >= 4 needed" in out
    assert ("'Running On-Demand Inf instances' (L-1945791B) = 8 vCPUs, the neuron build host inf2.8xlarge needs 32; "
            "fix: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-1945791B "
            "--desired-value 32 --region us-east-1") in out
    # the container image tag and the endpoint quota, with the code ListServiceQuotas returned
    assert (f"763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:{TAG}: ImageNotFound (Requested image not found); "
            "fix: pick a vLLM DLC tag published in this region (-c sagemaker_vllm_tag=<tag>") in out
    assert ("'ml.g6.xlarge for endpoint usage' = 0; fix: aws service-quotas request-service-quota-increase "
            "--service-code sagemaker --quota-code L-D470D954 --desired-value 1 --region us-east-1") in out
    for b in ("sagemaker", "g5g", "inf2"):
        assert f"{b:<10} blocked" in out


def test_built_images_and_enough_quota_are_ready(aws, cdk_json, capsys):
    ami = _registered_ami()
    built = {**PUBLIC, **{n: ami for n in IMAGE_PARAMETERS.values()}}
    rc, out = run(["--backends", "sagemaker,g6,g5g,inf2,trn1", *cdk_json], capsys,
                  sq=quotas({"L-1216C47A": 64.0, "L-DB2E81BA": 64.0, "L-1945791B": 8.0, "L-2C3B7624": 8.0}),
                  ssm=ssm_parameters(built), ecr=ecr_images({TAG}, registry="763104351884"))
    assert rc == 0, out
    assert f"{IMAGE_PARAMETERS['vllm-sm75']} = {ami}" in out
    assert GPU_DLAMI.format(arch="x86_64") + " = ami-0aaaaaaaaaaaaaaaa" in out  # g6 boots the public DLAMI
    assert "build host" not in out  # nothing to build
    assert f"vllm:{TAG} exists" in out


def test_standard_quota_for_the_first_build_type_only_warns_about_the_fallback(aws, cdk_json, capsys):
    rc, out = run(["--backends", "g5g", *cdk_json], capsys,
                  sq=quotas({"L-1216C47A": 32.0, "L-DB2E81BA": 64.0}),
                  ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert "c7g.8xlarge: 'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' (L-1216C47A) = 32 >= 32" in out
    assert ("its fallback c7g.16xlarge (64 vCPUs) would not fit: aws service-quotas request-service-quota-increase "
            "--service-code ec2 --quota-code L-1216C47A --desired-value 64 --region us-east-1") in out


def test_public_parameter_that_does_not_resolve_blocks(aws, cdk_json, capsys):
    """The PyTorch 2.9 Neuron DLAMI parameter (the 2.31 line's parent) is not published in the
    region: that build cannot start."""
    ssm = ssm_parameters({k: v for k, v in PUBLIC.items() if k != NEURON_DLAMI})
    rc, out = run(["--backends", "inf2,g6", *cdk_json, "-c", "neuron_sdk=2.31"], capsys,
                  sq=quotas({"L-1945791B": 8.0, "L-DB2E81BA": 8.0}), ssm=ssm, ecr=ecr_images({TAG}))
    assert rc == 1
    assert (f"{NEURON_DLAMI} does not resolve in us-east-1: the neuron-sdk231 build cannot start there; "
            "fix: use another region (-c region=<region>)") in out
    assert f"{IMAGE_PARAMETERS['neuron-sdk231']} missing" in out and "python -m harness images build neuron-sdk231 --region us-east-1" in out
    assert "g6         ready" in out


def test_the_228_dlami_is_looked_up_by_its_name(aws, cdk_json, capsys):
    """The default line's parent has no SSM parameter: preflight asks for the AMI by name, as the
    deploy does (Custom::AmiByName). moto knows no Neuron DLAMI: one BLOCK line with the fix."""
    rc, out = run(["--backends", "inf2", *cdk_json], capsys, sq=quotas({"L-1945791B": 8.0}),
                  ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert rc == 1
    assert ("no Amazon-owned AMI named 'Deep Learning AMI Neuron (Ubuntu 24.04) 20260227' in us-east-1: the neuron "
            "build cannot start there; fix: -c neuron_parent_image=ami-...") in out


def test_neuron_parent_image_that_does_not_exist_blocks(aws, cdk_json, capsys):
    rc, out = run(["--backends", "inf2", *cdk_json, "-c", "neuron_parent_image=ami-0123456789abcdef0"], capsys,
                  sq=quotas({"L-1945791B": 8.0}), ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert rc == 1 and "neuron_parent_image ami-0123456789abcdef0 in us-east-1" in out and "fix: " in out
    ami = boto3.client("ec2", region_name="us-east-1").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    rc, out = run(["--backends", "inf2", *cdk_json, "-c", f"neuron_parent_image={ami}"], capsys,
                  sq=quotas({"L-1945791B": 8.0}), ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert f"{ami} (neuron_parent_image)" in out


def test_container_image_registry_follows_the_region(aws, tmp_path, capsys):
    """af-south-1's DLCs live in another registry account (kit/dlc.py)."""
    p = tmp_path / "cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {"region": "af-south-1"}}))
    rc, out = run(["--backends", "sagemaker", "--cdk-json", str(p)], capsys, region="af-south-1",
                  sq=quotas({}), ssm=ssm_parameters({}), ecr=ecr_images({TAG}, registry=DLC_ACCOUNT_BY_REGION["af-south-1"]))
    assert f"626614931356.dkr.ecr.af-south-1.amazonaws.com/vllm:{TAG} exists" in out
    rc, out = run(["--backends", "sagemaker", "--cdk-json", str(p)], capsys, region="af-south-1",
                  sq=quotas({}), ssm=ssm_parameters({}), ecr=ecr_images(None))
    assert rc == 1 and "no vllm repository in af-south-1; fix: deploy SageMaker in another region" in out


def test_container_image_access_denied_is_a_warning_naming_the_permission(aws, cdk_json, capsys):
    ecr = Replay("ecr", lambda op, params: Error("AccessDeniedException", "User: x is not authorized to "
                                                  "perform: ecr:BatchGetImage", 400))
    rc, out = run(["--backends", "sagemaker", *cdk_json], capsys, sq=quotas({}), ssm=ssm_parameters({}), ecr=ecr)
    assert rc == 0 and "could not check" in out and "(needs ecr:BatchGetImage)" in out


def test_sagemaker_fix_falls_back_to_the_recorded_code():
    assert account.sagemaker_fix("ml.g6.xlarge", None, "us-east-2").endswith(
        "--quota-code L-D470D954 --desired-value 1 --region us-east-2")
    assert "list-service-quotas --service-code sagemaker" in account.sagemaker_fix("ml.g7e.12xlarge", None, "us-east-1")


@pytest.mark.parametrize("itype, cls", [("c7g.8xlarge", "Standard"), ("m7i.large", "Standard"), ("g6.xlarge", "G"),
                                        ("g5g.2xlarge", "G"), ("inf2.xlarge", "Inf"), ("trn1.2xlarge", "Trn"),
                                        ("p5.48xlarge", None), ("dl1.24xlarge", None)])
def test_quota_class(itype, cls):
    assert account.quota_class(itype) == cls


def test_bedrock_block_names_the_fix(aws, cdk_json, capsys):
    from tests.harness.test_preflight import FakeBedrock

    _bootstrap("us-east-1")
    rc = preflight.main(["--backends", "bedrock", *cdk_json], session=boto3.Session(region_name="us-east-1"),
                        bedrock=FakeBedrock(entitlementAvailability="NOT_AVAILABLE"))
    out = capsys.readouterr().out
    assert rc == 1 and "fix: enable access to amazon.nova-micro-v1:0 in the Bedrock console" in out
    assert "not bootstrapped" not in out


def test_no_bootstrap_names_the_command_with_the_account(aws, cdk_json, capsys):
    rc = preflight.main(["--backends", "bedrock", *cdk_json], session=boto3.Session(region_name="us-east-1"),
                        bedrock=__import__("tests.harness.test_preflight", fromlist=["x"]).FakeBedrock())
    out = capsys.readouterr().out
    assert rc == 1 and "fix: npx cdk bootstrap aws://123456789012/us-east-1" in out


@pytest.mark.parametrize("image_az, expected", [
    ("us-east-1b", "offer c7g.8xlarge, c7g.16xlarge, g5g.2xlarge; the build will use us-east-1b (image_az)"),
    ("us-east-1f", "image_az us-east-1f does not offer c7g.8xlarge, c7g.16xlarge, g5g.2xlarge in this account; "
                   "AZs that do: us-east-1a, us-east-1b, us-east-1c, us-east-1d (fix: set -c image_az to one of "
                   "them, or drop it)"),
])
def test_build_subnet_check_honours_image_az_as_the_deploy_does(aws, cdk_json, capsys, image_az, expected):
    """-c image_az is the build placement's preferred AZ (stacks/images.py -> Custom::AzChoice
    PreferredAz); preflight makes the same decision (moto's offerings: a-d offer all three)."""
    rc, out = run(["--backends", "g5g", *cdk_json, "-c", f"image_az={image_az}"], capsys,
                  sq=quotas({"L-1216C47A": 64.0, "L-DB2E81BA": 64.0}),
                  ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    line = next(line for line in out.splitlines() if "vllm-sm75 build subnet" in line)
    assert expected in line, out
    assert ("BLOCK" in line) == (image_az == "us-east-1f")


# Two fresh-account blockers preflight once missed: the token secret and the CodeBuild quota.

def test_a_missing_token_secret_blocks_every_backend_that_reads_it(aws, cdk_json, capsys):
    sq, ssm = quotas({"L-DB2E81BA": 64}), ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "bedrock,sagemaker,g6", *cdk_json], capsys, sq=sq, ssm=ssm, ecr=ecr_images({TAG}),
                  secrets=secret_values({}))
    assert rc == 1
    blocked = [line for line in rows(out, "BLOCK") if "HF token secret" in line]
    assert [line.split()[0] for line in blocked] == ["sagemaker", "g6"]  # Bedrock reads no token
    assert all("secret inference-kit/hf-token does not exist in us-east-1; fix: aws secretsmanager create-secret "
               "--name inference-kit/hf-token --secret-string \"$HF_TOKEN\" --region us-east-1" in line for line in blocked)
    assert not [line for line in out.splitlines() if line.startswith("bedrock") and "HF token" in line]


@pytest.mark.parametrize("value, status, says", [
    (FAKE_HF_TOKEN, "ok", "shaped like one"),
    (json.dumps({"HF_TOKEN": FAKE_HF_TOKEN}), "BLOCK", "does not hold a bare Hugging Face token"),
    (FAKE_HF_TOKEN + "\n", "BLOCK", "whitespace around the token"),
    ("   ", "BLOCK", "is empty"),
    (None, "BLOCK", "binary data"),
    ("hf_" + "a" * 20, "warn", "not hf_ and 34 letters (23 characters)"),
])
def test_the_token_secret_is_checked_for_shape_and_never_printed(aws, cdk_json, capsys, value, status, says):
    sq, ssm = quotas({"L-DB2E81BA": 64}), ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "g6", *cdk_json], capsys, sq=sq, ssm=ssm, ecr=ecr_images({TAG}),
                  secrets=secret_values({"inference-kit/hf-token": value}))
    (line,) = [ln for ln in out.splitlines() if "HF token secret" in ln]
    assert re.search(rf"\s{status}\s", line) and says in line
    assert rc == (1 if status == "BLOCK" else 0)
    if value and value.strip():
        assert value.strip() not in out and "FakeToken" not in out  # neither the value nor a part of it


def test_a_token_secret_scheduled_for_deletion_blocks_with_the_restore_command(aws, cdk_json, capsys):
    # The message moto 5.2.5 gives for GetSecretValue on a deleted secret (secretsmanager/models.py).
    deleted = Replay("secretsmanager", lambda op, p: Error(
        "InvalidRequestException", "You can't perform this operation on the secret because it was marked for deletion."))
    sq, ssm = quotas({"L-DB2E81BA": 64}), ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "g6", *cdk_json], capsys, sq=sq, ssm=ssm, ecr=ecr_images({TAG}), secrets=deleted)
    (line,) = [ln for ln in rows(out, "BLOCK") if "HF token secret" in ln]
    assert "scheduled for deletion" in line and "aws secretsmanager restore-secret --secret-id inference-kit/hf-token" in line


def test_an_unreadable_token_secret_is_a_warning_naming_the_permission(aws, cdk_json, capsys):
    denied = Replay("secretsmanager", lambda op, p: Error("AccessDeniedException", "User is not authorized to perform: "
                                                          "secretsmanager:GetSecretValue"))
    sq, ssm = quotas({"L-DB2E81BA": 64}), ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "g6", *cdk_json], capsys, sq=sq, ssm=ssm, ecr=ecr_images({TAG}), secrets=denied)
    (line,) = [ln for ln in out.splitlines() if "HF token secret" in ln]
    assert " warn " in line and "needs secretsmanager:GetSecretValue" in line and rc == 0


def test_a_zero_codebuild_quota_blocks_the_backends_that_serve_a_package(aws, cdk_json, capsys):
    sq = quotas({"L-DB2E81BA": 64, "L-4DDC4A99": 0.0})
    ssm = ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "sagemaker,g6", "-c", "g6_model=package", *cdk_json], capsys, sq=sq, ssm=ssm,
                  ecr=ecr_images({TAG}))
    assert rc == 1
    (line,) = [ln for ln in out.splitlines() if "package build quota" in ln]
    assert line.split()[0] == "g6" and " BLOCK " in line
    assert "'Concurrently running builds for Linux/Large environment' (L-4DDC4A99) = 0" in line
    assert line.endswith("fix: aws service-quotas request-service-quota-increase --service-code codebuild "
                         "--quota-code L-4DDC4A99 --desired-value 1 --region us-east-1")
    assert re.search(r"^sagemaker\s+ready", out, re.M)  # it serves no package: not blocked by CodeBuild


def test_the_codebuild_quota_is_not_asked_without_a_package(aws, cdk_json, capsys):
    sq = quotas({"L-DB2E81BA": 64})
    ssm = ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "g6", *cdk_json], capsys, sq=sq, ssm=ssm, ecr=ecr_images({TAG}))
    assert rc == 0 and "package build quota" not in out
    assert all(p.get("ServiceCode") != "codebuild" for _, p in sq.calls)


def test_a_package_variant_needs_the_build_too(aws, cdk_json, capsys):
    sq = quotas({"L-DB2E81BA": 64, "L-4DDC4A99": 1.0})
    ssm = ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-cuda"]: "ami-0b"})
    rc, out = run(["--backends", "g6", "-c", "g6_variants=emb4=package:emb4", *cdk_json], capsys, sq=sq, ssm=ssm,
                  ecr=ecr_images({TAG}))
    (line,) = [ln for ln in out.splitlines() if "package build quota" in ln]
    assert " ok " in line and "= 1" in line and rc == 0


def test_a_missing_tag_names_the_newest_recorded_tag_the_region_has(aws, cdk_json, capsys):
    # The region lacks the configured tag but has 0.30.0's and 0.29.0's; one more
    # BatchGetImage asks for every recorded candidate (kit/dlc.py) and the fix names the newest.
    ecr = ecr_images({"0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker", "0.29.0-gpu-py312-cu130-ubuntu24.04-sagemaker"})
    rc, out = run(["--backends", "sagemaker", "-c", "sagemaker_vllm_tag=0.99.0-gpu-py312-cu130-ubuntu24.04-sagemaker",
                   *cdk_json], capsys, sq=quotas({}), ssm=ssm_parameters({}), ecr=ecr)
    (line,) = [ln for ln in out.splitlines() if "container image" in ln]
    assert " BLOCK " in line and rc == 1
    assert line.endswith("fix: -c sagemaker_vllm_tag=0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker (the newest of the "
                         "kit's recorded published tags, kit/dlc.py, present in us-east-1)")
    (first, second) = [p for op, p in ecr.calls]
    assert len(second["imageIds"]) == len(set(t["imageTag"] for t in second["imageIds"])) > 1


def test_a_sagemaker_region_without_a_registry_is_refused_before_any_call(aws, tmp_path, capsys):
    p = tmp_path / "cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {"region": "us-east-1", "sagemaker_region": "us-gov-west-1"}}))
    rc = preflight.main(["--backends", "sagemaker", "--cdk-json", str(p)])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and line.startswith("preflight: sagemaker_region='us-gov-west-1': us-gov-west-1 has no Deep")


# A workshop attendee boots the organizer's shared image with -c <id>_ami (harness.account.images share):
# preflight checks that AMI (DescribeImages, moto), not the image parameter, and sends nobody to
# build an image (hours and dollars) the deploy would not boot.

def _registered_ami(region="us-east-1"):
    return boto3.client("ec2", region_name=region).register_image(
        Name="inference-kit-vllm-sm75-gpu-test-2026-12-01T09-00-00.000Z", Architecture="arm64",
        RootDeviceName="/dev/sda1", BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 150}}],
    )["ImageId"]


def test_an_ami_given_with_c_is_checked_instead_of_the_image_parameter(aws, cdk_json, capsys):
    ami = _registered_ami()
    rc, out = run(["--backends", "g5g", "-c", f"g5g_ami={ami}", *cdk_json], capsys,
                  sq=quotas({"L-DB2E81BA": 8.0}), ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert rc == 0, out
    assert f"g5g_ami={ami} available in us-east-1 (owner " in out
    assert "not built" not in out and "build host" not in out and "harness images build" not in out


def test_an_ami_given_with_c_that_this_account_cannot_see_blocks_with_the_share_command(aws, cdk_json, capsys):
    rc, out = run(["--backends", "g5g", "-c", "g5g_ami=ami-0123456789abcdef0", *cdk_json], capsys,
                  sq=quotas({"L-DB2E81BA": 8.0}), ssm=ssm_parameters(PUBLIC), ecr=ecr_images({TAG}))
    assert rc == 1
    (line,) = rows(out, "BLOCK")
    # the account id is this account's (moto's STS GetCallerIdentity): the owner runs the command as it is
    assert line.endswith("g5g_ami=ami-0123456789abcdef0 is not visible to this account in us-east-1; fix: ask the "
                         "account that shared ami-0123456789abcdef0 (your workshop organizer) to run python -m "
                         "harness images share --account 123456789012 --ami ami-0123456789abcdef0 --region us-east-1, "
                         "or drop -c g5g_ami"), out
    assert "harness images build" not in out


def test_a_kit_image_parameter_whose_ami_is_gone_blocks_with_the_build_command(aws, cdk_json, capsys):
    """The parameter outlives its AMI (harness.account.leftovers lists the AMI's snapshots as billing, the
    parameter as free): 'ok' on the parameter alone sent the user to a deploy its image check refuses."""
    rc, out = run(["--backends", "g5g", *cdk_json], capsys, sq=quotas({"L-1216C47A": 64.0, "L-DB2E81BA": 64.0}),
                  ssm=ssm_parameters(PUBLIC | {IMAGE_PARAMETERS["vllm-sm75"]: "ami-0123456789abcdef0"}),
                  ecr=ecr_images({TAG}))
    assert rc == 1
    (line,) = [ln for ln in rows(out, "BLOCK") if "AMI parameter" in ln]
    assert line.endswith(f"image vllm-sm75 in us-east-1: {IMAGE_PARAMETERS['vllm-sm75']} names ami-0123456789abcdef0, "
                         "which is not visible to this account (deregistered?); fix: python -m harness images build "
                         "vllm-sm75 --region us-east-1"), out
    assert "vllm-sm75 build host" in out  # and what the build needs is checked, as for an image never built
