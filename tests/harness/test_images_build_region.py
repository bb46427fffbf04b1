"""``python -m harness images build`` records the region it makes things in (harness/account/touched.py),
before it deploys the image stack or starts a pipeline, so ``python -m harness leftovers`` looks
there once the configuration no longer names it (tests/harness/test_leftovers.py: a recorded region
is searched). Image Builder, EC2 and Logs answers: tests/harness/imagebuilder_recorded.py, replayed
through botocore's Stubber."""
from __future__ import annotations

import io
import json

import pytest

from harness.account import images, touched
from tests.harness.imagebuilder_recorded import Account, Build
from tests.harness.test_images import EMPTY_CDK_JSON, aws_for

WEST = "us-west-2"
MOVED = ["-c", f"g6_region={WEST}", "--region", WEST]  # g6 boots vllm-cuda, moved out of the kit's region


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.cdk.json of the machine's user
    return tmp_path / "state" / "touched.json"


def test_the_region_is_recorded_before_the_image_stack_is_deployed(state):
    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")}, pipelines=set())
    seen = []

    def deploy(stack):
        seen.append((stack, touched.recorded_regions()))  # what leftovers would know if the deploy broke off
        acct.pipelines.add("inference-kit-vllm-cuda-build")
        return 0
    aws = aws_for(acct.clients())
    aws.record_region = touched.record_region
    out = io.StringIO()
    rc = images.main(["build", "vllm-cuda", *MOVED, "--cdk-json", EMPTY_CDK_JSON], aws=aws, out=out, deploy=deploy)
    assert rc == 0, out.getvalue()
    assert seen == [("VllmCudaImageStack-us-west-2", [WEST])]
    (entry,) = json.loads(state.read_text())["regions"]
    assert entry["region"] == WEST
    assert entry["why"] == "images build vllm-cuda: deploys VllmCudaImageStack-us-west-2 (its retained KMS key)"


def test_the_region_is_recorded_before_a_pipeline_starts():
    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")})
    events = []
    aws = aws_for(acct.clients())
    aws.record_region = lambda region, why: events.append((region, why, list(acct.started)))
    out = io.StringIO()
    rc = images.main(["build", "vllm-cuda", *MOVED, "--cdk-json", EMPTY_CDK_JSON], aws=aws, out=out)
    assert rc == 0, out.getvalue()
    assert events == [(WEST, "images build vllm-cuda: starts inference-kit-vllm-cuda-build (AMIs and snapshots)", [])]
    assert acct.started == ["inference-kit-vllm-cuda-build"]


def test_the_command_records_in_the_users_state(state, monkeypatch):
    """``main`` without an injected Aws (the command as run) records through touched.record_region."""
    import boto3

    acct = Account({"inference-kit-vllm-cuda-build": Build("inference-kit-vllm-cuda-build")})
    clients = acct.clients()
    monkeypatch.setattr(boto3, "client", lambda service, region_name=None: clients[service])
    monkeypatch.setattr(images, "_price_book", lambda: (lambda itype, region: None))
    monkeypatch.setattr(images.time, "sleep", lambda s: None)
    out = io.StringIO()
    rc = images.main(["build", "vllm-cuda", *MOVED, "--cdk-json", EMPTY_CDK_JSON, "--poll", "0.01"], out=out)
    assert rc == 0, out.getvalue()
    assert touched.recorded_regions() == [WEST]


def test_a_refused_build_records_nothing(state, capsys):
    aws = aws_for({})
    aws.record_region = touched.record_region
    rc = images.main(["build", "vllm-sm75", "-c", "backends=g6", "--cdk-json", EMPTY_CDK_JSON], aws=aws,
                     out=io.StringIO())
    assert rc == 2 and not state.exists()
