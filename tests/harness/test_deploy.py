"""python -m harness deploy: the images of exactly what is deployed are checked
before the CDK is called; a missing one is one line with its build command and nothing runs.
SSM and EC2 answers replayed through botocore's Stubber (tests/harness/aws_replay.py)."""
from __future__ import annotations

import io
import json

import pytest

from harness.account import deploy
from tests.harness.aws_replay import Error, Replay, ssm_parameters

SM75 = "/imagebuilder/inference-kit/ami/vllm-sm75"
NEURON = "/imagebuilder/inference-kit/ami/neuron-sdk228"
ROOT_CDK_JSON = "cdk.json"


def images(gone=(), states=None):
    """DescribeImages: the account's AMIs are available, except ``gone`` (deregistered:
    InvalidAMIID.NotFound, EC2 API reference) and those ``states`` names."""
    def ec2(op, params):
        assert op == "describe_images", op
        (ami,) = params["ImageIds"]
        if ami in gone:
            return Error("InvalidAMIID.NotFound", f"The image id '[{ami}]' does not exist")
        return {"Images": [{"ImageId": ami, "State": (states or {}).get(ami, "available"), "OwnerId": "123456789012"}]}
    return ec2


def go(argv, params=None, ec2=None):
    ran: list[list[str]] = []
    clients = {"ssm": ssm_parameters(params or {}), "ec2": Replay("ec2", ec2 or images())}
    out = io.StringIO()
    rc = deploy.main(argv, client=lambda service, region: clients[service], run=lambda cmd: ran.append(cmd) or 0,
                     out=out)
    return rc, out.getvalue(), ran, clients


def test_fresh_account_all_refuses_before_anything_runs_one_line_per_missing_image():
    rc, out, ran, clients = go(["--all"])
    assert rc == 1 and ran == []
    lines = out.splitlines()
    assert lines[0] == (f"image vllm-sm75 (us-east-1): {SM75} does not exist (G5gStack boots it); "
                        "build it: python -m harness images build vllm-sm75 --region us-east-1")
    assert lines[1] == (f"image neuron (us-east-1): {NEURON} does not exist (Inf2Stack, Trn1Stack boot it); "
                        "build it: python -m harness images build neuron --region us-east-1")
    assert lines[2] == ("nothing was deployed: 2 machine images are missing; or deploy the rest: "
                        "python -m harness deploy --all --leave-out-missing")
    assert clients["ssm"].calls == [("get_parameters", {"Names": [NEURON, SM75]})]


def test_one_backend_that_boots_a_public_image_deploys_with_backends_narrowed():
    rc, out, ran, clients = go(["G6Stack"])
    assert rc == 0
    assert ran == [["npx", "cdk", "deploy", "G6Stack", "-c", "backends=g6"]]
    assert clients["ssm"].calls == []  # g6 boots the public DLAMI: nothing to check


def test_leave_out_missing_deploys_the_rest():
    rc, out, ran, _ = go(["--all", "--leave-out-missing"], {SM75: "ami-0123456789abcdef0"})
    assert rc == 0
    assert "leaving out inf2, trn1" in out
    assert ran == [["npx", "cdk", "deploy", "--all", "-c", "backends=bedrock,sagemaker,g6,g5g"]]


def test_everything_built_deploys_all_and_passes_context_and_cdk_arguments():
    rc, out, ran, _ = go(["--all", "-c", "ttl_hours=2", "--", "--require-approval", "never"],
                         {SM75: "ami-0123456789abcdef0", NEURON: "ami-0a1b2c3d4e5f60718"})
    assert rc == 0
    assert ran == [["npx", "cdk", "deploy", "--all", "-c", "backends=bedrock,sagemaker,g6,g5g,inf2,trn1",
                    "-c", "ttl_hours=2", "--require-approval", "never"]]


def test_a_parameter_that_outlived_its_ami_is_a_missing_image():
    """The image parameter stays after its AMI is deregistered (harness.account.leftovers lists the AMI's
    snapshots as billing, the parameter as free); deploying on the parameter alone would fail at
    the instance, after the stacks before it were up."""
    rc, out, ran, clients = go(["--all"], {SM75: "ami-0123456789abcdef0", NEURON: "ami-0a1b2c3d4e5f60718"},
                               ec2=images(gone={"ami-0123456789abcdef0"}, states={"ami-0a1b2c3d4e5f60718": "pending"}))
    assert rc == 1 and ran == []
    assert out.splitlines() == [
        f"image vllm-sm75 (us-east-1): {SM75} names ami-0123456789abcdef0, which is not visible to this account "
        "(deregistered?) (G5gStack boots it); build it: python -m harness images build vllm-sm75 --region us-east-1",
        f"image neuron (us-east-1): {NEURON} names ami-0a1b2c3d4e5f60718, which is pending (Inf2Stack, Trn1Stack "
        "boot it); build it: python -m harness images build neuron --region us-east-1",
        "nothing was deployed: 2 machine images are missing; or deploy the rest: "
        "python -m harness deploy --all --leave-out-missing"]
    assert [c[1] for c in clients["ec2"].calls] == [{"ImageIds": ["ami-0123456789abcdef0"]},
                                                   {"ImageIds": ["ami-0a1b2c3d4e5f60718"]}]


def test_an_ami_given_by_id_must_be_visible_to_this_account():
    def ec2(op, params):
        return Error("InvalidAMIID.NotFound", "The image id '[ami-0123456789abcdef0]' does not exist")
    rc, out, ran, _ = go(["G5gStack", "-c", "g5g_ami=ami-0123456789abcdef0"], ec2=ec2)
    assert rc == 1 and ran == []
    assert out.splitlines()[0].startswith("image g5g_ami (us-east-1): ami-0123456789abcdef0 is not visible to "
                                          "this account (G5gStack boots it); share it with this account")


def test_an_ami_given_by_id_that_is_available_deploys():
    def ec2(op, params):
        return {"Images": [{"ImageId": "ami-0123456789abcdef0", "State": "available", "OwnerId": "111122223333"}]}
    rc, out, ran, _ = go(["G5gStack", "-c", "g5g_ami=ami-0123456789abcdef0", "--dry-run"], ec2=ec2)
    assert rc == 0 and ran == []
    assert out.strip() == "$ npx cdk deploy G5gStack -c backends=g5g -c g5g_ami=ami-0123456789abcdef0"


@pytest.mark.parametrize("argv, words", [
    (["NetworkStack"], "'NetworkStack' is not a backend stack of this configuration"),
    (["G6Stack", "--all"], "give stacks or --all, not both"),
    (["-c", "ttl_hour=1"], "unknown context key 'ttl_hour'"),
    (["-c", "g5g_ami=nope"], "g5g_ami='nope' is not an AMI id"),
])
def test_bad_input_is_one_line_exit_2(argv, words, capsys):
    rc, out, ran, _ = go(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and ran == [] and words in err and "\n" not in err


def test_a_check_that_cannot_run_creates_nothing():
    clients = {"ssm": Replay("ssm", lambda op, p: Error("AccessDeniedException", "not authorized to perform: "
                                                                                "ssm:GetParameters"))}
    out = io.StringIO()
    ran = []
    rc = deploy.main(["--all"], client=lambda s, r: clients[s], run=lambda c: ran.append(c) or 0, out=out)
    assert rc == 1 and ran == []
    assert out.getvalue().startswith("harness deploy: could not check the machine images: An error occurred "
                                     "(AccessDeniedException)")


def test_repo_cdk_json_is_the_default_context():
    # cdk.json leaves backends to an attendee's cdk.context.json (cdk.json's context would shadow
    # it: tests/stacks/test_config.py) and to kit.config's default, every catalog backend.
    from kit.config import parse

    with open(ROOT_CDK_JSON) as f:
        assert "backends" not in json.load(f)["context"]
    assert parse({}).backend_ids == ("bedrock", "sagemaker", "g6", "g5g", "inf2", "trn1")
