"""Preflight for a workshop attendee, whose backends boot an image the organizer's account owns and
shared (``-c <id>_ami``, ``python -m harness images share``), and for a backend whose image holds
its weights: what the deploy bills per hour, that the image bills its owner, who to ask when the
share is missing, and no Hugging Face token asked for when the boot downloads nothing
(harness/account/preflight_fresh.py check_shared_image, harness/account/preflight_weights.py baked_weights).

Every AWS answer is replayed through a real botocore client with Stubber (tests/harness/aws_replay.py),
which validates each request and response against botocore's service model: STS
GetCallerIdentity, EC2 DescribeImages (a shared AMI as another account sees it: no tags, EC2 User
Guide "Share an AMI with specific AWS accounts") and DescribeInstanceTypeOfferings, SSM, Secrets Manager.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from harness.account import preflight
from harness.account.preflight_weights import built_in
from kit.catalog import GEMMA_E2B, GEMMA_E2B_INT4
from kit.image_facts import IMAGE_PARAMETERS
from tests.harness.aws_replay import Error, Replay, secret_values

ORGANIZER, ATTENDEE = "111122223333", "444455556666"
SHARED, OWN = "ami-0aaaabbbbccccdddd", "ami-0123456789abcdef0"
PIN, OLD = "1" * 40, "2" * 40
R = "us-east-1"


def image(ami: str, name: str, owner: str, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """An available AMI as DescribeImages returns it to ``owner``'s account (with its tags) or to an
    account it is shared with (``tags`` None: none shown)."""
    out: dict[str, Any] = {"ImageId": ami, "Name": name, "OwnerId": owner, "State": "available",
                           "Architecture": "x86_64", "CreationDate": "2026-12-01T10:02:11.000Z",
                           "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": "snap-0aaa",
                                                                                      "VolumeSize": 150}}]}
    if tags:
        out["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    return out


class Session:
    """A boto3 Session stand-in that hands out the replayed clients."""

    def __init__(self, clients: dict[str, Replay]):
        self.clients = clients

    def client(self, service: str, region_name: str | None = None) -> Replay:
        return self.clients[service]


def run(argv: list[str], tmp_path, capsys, *, visible: dict[str, dict], parameters: dict[str, str] | None = None,
        secrets: dict[str, str | None] | None = None, account: str = ATTENDEE) -> tuple[int, str, dict[str, Replay]]:
    def sts(op, p):
        assert op == "get_caller_identity"
        return {"UserId": "AIDAEXAMPLE", "Account": account, "Arn": f"arn:aws:iam::{account}:user/attendee"}

    def ec2(op, p):
        if op == "describe_images":
            (ami,) = p["ImageIds"]
            if ami not in visible:
                return Error("InvalidAMIID.NotFound", f"The image id '[{ami}]' does not exist")
            return {"Images": [visible[ami]]}
        assert op == "describe_instance_type_offerings", op
        (itype,) = p["Filters"][0]["Values"]
        return {"InstanceTypeOfferings": [{"InstanceType": itype, "LocationType": "availability-zone",
                                           "Location": az} for az in (f"{R}a", f"{R}b")]}

    values = parameters or {}

    def ssm(op, p):
        if op == "get_parameter":  # the CDK bootstrap version
            return {"Parameter": {"Name": p["Name"], "Type": "String", "Value": "27", "Version": 1}}
        assert op == "get_parameters", op
        out: dict[str, Any] = {"Parameters": [{"Name": n, "Type": "String", "Value": values[n], "Version": 1,
                                               "DataType": "aws:ec2:image"} for n in p["Names"] if n in values]}
        if [n for n in p["Names"] if n not in values]:
            out["InvalidParameters"] = [n for n in p["Names"] if n not in values]
        return out

    clients = {"sts": Replay("sts", sts), "ec2": Replay("ec2", ec2), "ssm": Replay("ssm", ssm)}
    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"app": "x", "context": {"region": R}}))
    rc = preflight.main(["--cdk-json", str(cdk), *argv], session=Session(clients), quota=lambda s, c: 64.0,
                        sagemaker_quota=lambda t: 1.0, ssm=clients["ssm"], secrets=secret_values(secrets or {}))
    return rc, capsys.readouterr().out, clients


def line(out: str, backend: str, check: str) -> str:
    (found,) = [ln for ln in out.splitlines() if ln.startswith(f"{backend} ") and f" {check} " in ln]
    return found


def test_an_attendee_booting_the_shared_vllm_cuda_image_sees_what_it_bills_and_needs_no_token(tmp_path, capsys):
    shared = image(SHARED, "inference-kit-vllm-cuda-build-2026-12-01T09-00-00.000Z", ORGANIZER)
    # No token secret in this account: a backend that needed one would be blocked.
    rc, out, clients = run(["--backends", "g6", "-c", f"g6_ami={SHARED}"], tmp_path, capsys, visible={SHARED: shared})
    assert rc == 0, out
    assert line(out, "g6", "shared image").endswith(
        f"{SHARED} belongs to account {ORGANIZER}: the image costs you nothing (its owner pays its snapshots); your "
        "deploy bills $0.8212/h while it runs (g6.xlarge $0.8048/h on demand, and 150 GiB gp3 root volume $0.0164/h); "
        f"if a launch is refused on its snapshots or key, ask {ORGANIZER} to run python -m harness images share "
        f"--account {ATTENDEE} --ami {SHARED} --region {R}")  # 0.8048 + 150 x $0.08 / 730 h
    assert "g6.xlarge $0.8048/h on demand (snapshot 2026-11-29" in line(out, "g6", "g6 price")  # the same figure
    token = line(out, "g6", "HF token secret")
    assert " ok " in token and token.endswith(
        f"not needed: image {SHARED} holds {GEMMA_E2B_INT4}, so the boot downloads nothing (the kit builds "
        f"{GEMMA_E2B_INT4} into the vllm-cuda image for this configuration; the tags of {SHARED}, shared by "
        f"{ORGANIZER}, are not visible here)")
    assert ("get_caller_identity", {}) in clients["sts"].calls
    assert [c for c in clients["ec2"].calls if c[0] == "describe_images"] == [("describe_images", {"ImageIds": [SHARED]})]


def test_a_shared_image_that_holds_no_weights_still_needs_the_token(tmp_path, capsys):
    """vllm-sm75 holds no weights (its GPU test serves the model on a test instance only)."""
    shared = image(SHARED, "inference-kit-vllm-sm75-gpu-test-2026-12-01T09-00-00.000Z", ORGANIZER)
    rc, out, _ = run(["--backends", "g5g", "-c", f"g5g_ami={SHARED}"], tmp_path, capsys, visible={SHARED: shared})
    assert rc == 1
    assert "g5g.2xlarge $0.556/h on demand, and 150 GiB gp3 root volume $0.0164/h" in line(out, "g5g", "shared image")
    assert line(out, "g5g", "HF token secret").endswith(
        f"secret inference-kit/hf-token does not exist in {R}; fix: aws secretsmanager create-secret --name "
        f"inference-kit/hf-token --secret-string \"$HF_TOKEN\" --region {R}")


def test_an_ami_that_is_not_someone_elses_kit_image_is_not_trusted_to_hold_weights(tmp_path, capsys):
    shared = image(SHARED, "my-own-gpu-image", ORGANIZER)
    rc, out, _ = run(["--backends", "g6", "-c", f"g6_ami={SHARED}"], tmp_path, capsys, visible={SHARED: shared})
    assert rc == 1 and "does not exist" in line(out, "g6", "HF token secret")


def test_a_share_that_is_missing_names_who_to_ask_with_this_accounts_id(tmp_path, capsys):
    rc, out, _ = run(["--backends", "g6", "-c", f"g6_ami={SHARED}"], tmp_path, capsys, visible={})
    assert rc == 1
    assert line(out, "g6", "AMI (-c)").endswith(
        f"g6_ami={SHARED} is not visible to this account in {R}; fix: ask the account that shared {SHARED} (your "
        f"workshop organizer) to run python -m harness images share --account {ATTENDEE} --ami {SHARED} --region {R}, "
        "or drop -c g6_ami")
    assert "shared image" not in out  # no owner to name, no cost line
    assert "does not exist" in line(out, "g6", "HF token secret")  # not visible: nothing proves it holds weights


def test_an_image_this_account_owns_is_judged_by_its_tags_and_shows_no_share_line(tmp_path, capsys):
    own = image(OWN, "inference-kit-neuron-build-2026-12-01T09-00-00.000Z", ATTENDEE,
                {"project": "aws-inference-kit", "kit-model": GEMMA_E2B, "kit-model-revision": PIN})
    params = {IMAGE_PARAMETERS["neuron"]: OWN}
    rc, out, _ = run(["--backends", "inf2", "-c", f"inf2_model_revision={PIN}"], tmp_path, capsys,
                     visible={OWN: own}, parameters=params)
    assert rc == 0, out
    assert line(out, "inf2", "HF token secret").endswith(
        f"not needed: image {OWN} holds {GEMMA_E2B} at {PIN[:12]}, so the boot downloads nothing (its tags "
        "kit-model and kit-model-revision)")
    assert "shared image" not in out
    # another pin than the image's: the boot downloads it, so the token is checked (and missing here)
    rc, out, _ = run(["--backends", "inf2", "-c", f"inf2_model_revision={OLD}"], tmp_path, capsys,
                     visible={OWN: own}, parameters=params)
    assert rc == 1 and "does not exist" in line(out, "inf2", "HF token secret")
    assert "baked weights" in out


@pytest.mark.parametrize("context", [
    {"backends": "g6,inf2,trn1"},
    {"backends": "trn1,g6", "g6_model": GEMMA_E2B, "model_revision": PIN},
    {"backends": "g6", "g6_model": "package:int8"},
    {"backends": "inf2", "inf2_instance_type": "inf2.8xlarge"},
    {"backends": "trn1,inf2", "inf2_model_revision": PIN},
    {"backends": "g5g,sagemaker"},
])
def test_what_preflight_says_an_image_holds_is_what_the_pipelines_tag_it_with(context):
    """built_in (plain Python, for preflight) and stacks/images.py's AMI tags (baked_tags) agree."""
    from kit.config import parse
    from stacks.images import image_specs

    ctx = {"region": R, **context}
    config = parse(ctx)
    tagged = {}
    for name, spec in image_specs(config).items():
        for p in spec.pipelines("s3://assets/key.zip"):
            if p.ami_tags.get("kit-model"):
                rev = p.ami_tags["kit-model-revision"]
                tagged[name] = (p.ami_tags["kit-model"], None if rev == "unpinned" else rev)
    _, targets = preflight.targets_from_config(ctx, None)
    assert built_in(targets) == tagged
