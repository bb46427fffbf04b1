"""harness images against recorded Image Builder, EC2, SSM, KMS and Logs answers
(tests/harness/imagebuilder_recorded.py), each validated by botocore's Stubber."""
from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest

from harness.account import images
from tests.harness.aws_replay import Error, Replay, ssm_parameters
from tests.harness.imagebuilder_recorded import ACCOUNT, T0, Account, Build

# the catalog's defaults, without the repo's cdk.json (a --cdk-json that does not exist is refused)
EMPTY_CDK_JSON = str(Path(__file__).with_name("fixtures") / "empty-cdk.json")
PRICES = {"g6.xlarge": 0.8048, "g5g.2xlarge": 0.556}  # harness/cost/price_snapshot.json (seed 000 cost table)


def clock(step_minutes: float = 15.0):
    t = {"now": T0 - dt.timedelta(minutes=step_minutes)}

    def now():
        t["now"] += dt.timedelta(minutes=step_minutes)
        return t["now"]
    return now


def aws_for(clients: dict[str, Replay], prices=PRICES) -> images.Aws:
    return images.Aws(client=lambda service, region: clients[service], price=lambda t, r: prices.get(t),
                      sleep=lambda s: None, now=clock())


def run(argv, clients, deploy=None):
    out = io.StringIO()
    rc = images.main(argv + ["--cdk-json", EMPTY_CDK_JSON], aws=aws_for(clients), out=out, deploy=deploy)
    return rc, out.getvalue()


def test_build_follows_a_build_to_its_ami_with_steps_elapsed_and_cost():
    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")})
    rc, out = run(["build", "vllm-cuda", "--region", "us-east-1"], acct.clients())
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("started inference-kit-vllm-cuda-build: arn:aws:imagebuilder:us-east-1:")
    # one line per change: state, workflow step, elapsed, estimated cost from the instance's price
    assert "BUILDING     build: ApplyBuildComponents (RUNNING)" in lines[1]
    assert "TESTING      test: RunTestSuite (RUNNING)" in out
    assert "g6.xlarge $0.8048/h" in out
    # the build instance ran 0-45 min, the test instance 46-60 min: 0.75 h + 0.233 h at $0.8048/h
    assert lines[-1] == ("vllm-cuda: ami-0abcdef1234567890 in us-east-1, published to "
                         "/imagebuilder/inference-kit/ami/vllm-cuda (1h00m, est. $0.79)")
    assert acct.started == ["inference-kit-vllm-cuda-build"]


def test_build_failure_shows_reason_failed_step_and_log_tail_and_exits_1():
    b = Build("inference-kit-vllm-sm75-build", instance_type="c7g.8xlarge", fail=True)
    acct = Account({"inference-kit-vllm-sm75-build": b, "inference-kit-vllm-sm75-gpu-test": Build("x")})
    rc, out = run(["build", "vllm-sm75"], acct.clients())
    assert rc == 1
    assert "FAILED: Workflow Execution ID: wf-a1b2c3d4-5678-90ab-cdef-EXAMPLE33333 failed with reason" in out
    assert "failed step ApplyBuildComponents: Document arn:aws:imagebuilder" in out
    assert "/aws/imagebuilder/inference-kit-vllm-sm75-build 1.0.4660/1:" in out
    assert "CMake Error at CMakeLists.txt:204" in out
    # no price for c7g.8xlarge here: said, not invented
    assert "cost unknown (no price for c7g.8xlarge)" in out
    assert out.splitlines()[-1].startswith("vllm-sm75: build failed in inference-kit-vllm-sm75-build after ")
    assert acct.started == ["inference-kit-vllm-sm75-build"]  # the gpu-test pipeline never started


def test_sm75_runs_build_then_gpu_test_and_publishes_the_promoted_image():
    acct = Account({"inference-kit-vllm-sm75-build": Build("inference-kit-vllm-sm75-build", tests=False,
                                                           ami="ami-0candidate0000000"),
                    "inference-kit-vllm-sm75-gpu-test": Build("inference-kit-vllm-sm75-gpu-test",
                                                              instance_type="g5g.2xlarge")})
    rc, out = run(["build", "vllm-sm75"], acct.clients())
    assert rc == 0, out
    assert acct.started == ["inference-kit-vllm-sm75-build", "inference-kit-vllm-sm75-gpu-test"]
    assert ("inference-kit-vllm-sm75-build done: ami-0candidate0000000 published to "
            "/imagebuilder/inference-kit/ami/vllm-sm75-candidate") in out
    assert out.splitlines()[-1].startswith("vllm-sm75: ami-0abcdef1234567890 in us-east-1, published to "
                                           "/imagebuilder/inference-kit/ami/vllm-sm75 (")


def test_missing_pipeline_deploys_the_image_stack_first_or_refuses_with_no_deploy():
    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")}, pipelines=set())
    rc, out = run(["build", "vllm-cuda", "--no-deploy"], acct.clients())
    assert rc == 1 and "deploy its stack first: npx cdk deploy VllmCudaImageStack" in out
    deployed = []

    def deploy(stack):
        deployed.append(stack)
        acct.pipelines.add("inference-kit-vllm-cuda-build")
        return 0
    rc, out = run(["build", "vllm-cuda"], acct.clients(), deploy=deploy)
    assert rc == 0 and deployed == ["VllmCudaImageStack"], out


# ImageSummary's members (list-image-pipeline-images.rst shows the same subset).
SUMMARY_KEYS = {"arn", "name", "type", "version", "platform", "state", "dateCreated", "tags"}


def test_status_lists_running_builds_only():
    b = Build("inference-kit-neuron-sdk228-build", instance_type="inf2.xlarge")
    acct = Account({b.name: b})
    acct.current = b

    def ib(op, p):
        if op == "list_image_pipelines":
            return acct.imagebuilder(op, p)
        if op == "list_image_pipeline_images":
            return {"requestId": "r", "imageSummaryList": [
                {**{k: v for k, v in b.image().items() if k in SUMMARY_KEYS}, "owner": ACCOUNT,
                 "outputResources": {"amis": []}, "buildType": "USER_INITIATED"}]}
        return acct.imagebuilder(op, p)
    clients = {"imagebuilder": Replay("imagebuilder", ib), "ec2": Replay("ec2", acct.ec2)}
    rc, out = run(["status"], clients)
    assert rc == 0
    assert out.startswith("inference-kit-neuron-sdk228-build 1.0.4660/1: BUILDING, build: ApplyBuildComponents (RUNNING)")
    assert "cost unknown (no price for inf2.xlarge)" in out  # not in this test's prices: said, not invented
    b.polls = 3  # AVAILABLE: nothing running
    rc, out = run(["status"], {"imagebuilder": Replay("imagebuilder", ib), "ec2": Replay("ec2", acct.ec2)})
    assert out.strip() == "no image build running in us-east-1"


def _image(ami, snaps, kit_image="vllm-sm75"):
    return {"ImageId": ami, "State": "available", "OwnerId": ACCOUNT, "CreationDate": "2026-12-01T10:02:11.000Z",
            "Name": f"inference-kit-{kit_image}-gpu-test-2026-12-01T09-00-00.000Z",
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": s, "VolumeSize": 150,
                                                                         "VolumeType": "gp3", "Encrypted": True}}
                                    for s in snaps],
            "Tags": [{"Key": "project", "Value": "aws-inference-kit"}, {"Key": "kit-image", "Value": kit_image}]}


def _snapshot(sid, full_bytes, key="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"):
    return {"SnapshotId": sid, "VolumeId": "vol-ffffffff", "State": "completed", "VolumeSize": 150,
            "FullSnapshotSizeInBytes": full_bytes, "Encrypted": True, "KmsKeyId": key, "OwnerId": ACCOUNT,
            "StartTime": dt.datetime(2026, 12, 1, 9, 40, tzinfo=dt.timezone.utc), "Progress": "100%",
            "Description": "Created by CreateImage(i-0a1b2c3d4e5f60718) for ami-0abcdef1234567890"}


def test_list_prices_each_amis_snapshots_per_month_and_marks_the_current_one():
    def ec2(op, p):
        if op == "describe_images":
            assert p == {"Owners": ["self"], "Filters": [{"Name": "tag:project", "Values": ["aws-inference-kit"]}]}
            return {"Images": [_image("ami-0abcdef1234567890", ["snap-0aaaaaaaaaaaaaaaa"])]}
        assert op == "describe_snapshots"
        return {"Snapshots": [_snapshot("snap-0aaaaaaaaaaaaaaaa", 32 * 1024 ** 3)]}
    ssm = ssm_parameters({"/imagebuilder/inference-kit/ami/vllm-sm75": "ami-0abcdef1234567890"})
    rc, out = run(["list", "--region", "us-east-1"], {"ec2": Replay("ec2", ec2), "ssm": ssm})
    assert rc == 0
    # 32 GB written x $0.05/GB-month (EBS User Guide) = $1.60
    assert "snap-0aaaaaaaaaaaaaaaa 32.0 GB  $1.60/month  <- /imagebuilder/inference-kit/ami/vllm-sm75" in out
    assert "us-east-1 total: $1.60/month" in out
    assert "Total $1.60/month" in out.splitlines()[-1]


@pytest.mark.parametrize("argv, words", [
    (["build", "nope"], "image 'nope' is not a kit image"),
    (["share", "--account", "12345"], "--account '12345' is not a 12-digit AWS account id"),
    (["share", "--account", "111122223333", "--ami", "ami-xyz"], "--ami 'ami-xyz' is not an AMI id"),
    (["frobnicate"], "invalid choice"),
    (["list", "--region", "zz-fake-9"], "zz-fake-9"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    rc = images.main(argv + ["--cdk-json", EMPTY_CDK_JSON], aws=aws_for({}), out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert rc == 2 and words in err and "\n" not in err and "Traceback" not in err


def test_build_line_says_when_a_price_is_missing_rather_than_inventing_one():
    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")})
    out = io.StringIO()
    rc = images.main(["build", "vllm-cuda", "--cdk-json", EMPTY_CDK_JSON], out=out,
                     aws=aws_for(acct.clients(), prices={}))
    assert rc == 0 and out.getvalue().splitlines()[-1].endswith("(1h00m, cost unknown)")


def test_an_access_error_is_one_line(capsys):
    def ib(op, p):
        return Error("AccessDeniedException", "User is not authorized to perform: imagebuilder:ListImagePipelines")
    out = io.StringIO()
    rc = images.main(["build", "vllm-cuda", "--cdk-json", EMPTY_CDK_JSON], out=out,
                     aws=aws_for({"imagebuilder": Replay("imagebuilder", ib)}))
    assert rc == 1
    assert out.getvalue() == ("harness images build: An error occurred (AccessDeniedException) when "
                              "calling the ListImagePipelines operation: User is not authorized to perform: "
                              "imagebuilder:ListImagePipelines\n")


def test_build_deploys_the_image_stack_with_the_context_that_makes_it_exist():
    acct = Account({"inference-kit-neuron-sdk231-build": Build("inference-kit-neuron-sdk231-build",
                                                                instance_type="inf2.xlarge")}, pipelines=set())
    contexts = []

    def deploy(stack):
        acct.pipelines.add("inference-kit-neuron-sdk231-build")
        contexts.append(stack)
        return 0
    assert images._stack_context({}, "neuron-sdk231") == ["neuron_sdk=2.31"]
    assert images._stack_context({"neuron_sdk": "2.31"}, "neuron-sdk231") == []
    assert images._stack_context({}, "neuron") == []
    rc, out = run(["build", "neuron-sdk231"], acct.clients(), deploy=deploy)
    assert rc == 0 and contexts == ["NeuronSdk231ImageStack"], out


def test_build_of_an_image_no_selected_backend_boots_is_refused_up_front(capsys):
    rc = images.main(["build", "vllm-sm75", "-c", "backends=g6", "--cdk-json", EMPTY_CDK_JSON], aws=aws_for({}),
                     out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == ("harness images build: no selected backend boots vllm-sm75 (backends=g6); select one "
                               "of g5g, e.g. -c backends=g5g")


def test_ctrl_c_while_following_says_the_build_goes_on_and_how_to_stop_it():
    """Image Builder runs the build by itself: stopping the command leaves a build (and its
    instance) billing, which the user must be told, with the command that cancels it."""
    acct = Account({"inference-kit-vllm-sm75-build": Build("inference-kit-vllm-sm75-build", instance_type="c7g.8xlarge"),
                    "inference-kit-vllm-sm75-gpu-test": Build("inference-kit-vllm-sm75-gpu-test")})

    def interrupt(seconds):
        raise KeyboardInterrupt
    aws = aws_for(acct.clients())
    aws.sleep = interrupt
    out = io.StringIO()
    rc = images.main(["build", "vllm-sm75", "--cdk-json", EMPTY_CDK_JSON], aws=aws, out=out)
    assert rc == 130
    arn = "arn:aws:imagebuilder:us-east-1:123456789012:image/inference-kit-vllm-sm75-build/1.0.4660/1"
    assert out.getvalue().splitlines()[-1] == (
        f"interrupted: the build {arn} goes on in us-east-1, its instance billed until it ends (and "
        "inference-kit-vllm-sm75-gpu-test will not start); see it: python -m harness images status --region "
        f"us-east-1; stop it: aws imagebuilder cancel-image-creation --image-build-version-arn {arn} --region us-east-1")
    assert acct.started == ["inference-kit-vllm-sm75-build"]


def test_build_in_a_region_where_no_backend_boots_the_image_is_refused_up_front(capsys):
    """The app makes a region's image stacks only for the backends placed there (stacks/wiring.py):
    'images build vllm-sm75 --region us-west-2' with g5g in us-east-1 ran 'npx cdk deploy
    VllmSm75ImageStack-us-west-2', which the CDK answers with no such stack."""
    rc = images.main(["build", "vllm-sm75", "--region", "us-west-2", "--cdk-json", EMPTY_CDK_JSON], aws=aws_for({}),
                     out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == ("harness images build: no selected backend that boots vllm-sm75 deploys to us-west-2 "
                               "(g5g deploys to us-east-1), so the app has no vllm-sm75 image stack there; build it "
                               "where it boots (--region us-east-1), or move it: -c g5g_region=us-west-2")
    # placed there, it is the region's own stack
    assert images._stack_context({"g5g_region": "us-west-2"}, "vllm-sm75", "us-west-2") == []
