"""Preflight shows the commit each selected backend will serve, and warns when the Neuron image's
baked commit (its AMI tags, stacks/images.py baked_tags) is not the configured one.

EC2 images from moto (tags on a registered AMI), SSM and ECR replayed (tests/harness/aws_replay.py),
as in test_preflight_account.py.
"""
from __future__ import annotations

import json

import boto3
import pytest

from kit.catalog import GEMMA_E2B, GEMMA_E2B_INT4
from kit.image_facts import IMAGE_PARAMETERS
from tests.harness.aws_replay import ecr_images, ssm_parameters
from tests.harness.test_preflight_account import PUBLIC, TAG, quotas, rows, run

PIN, OLD = "1" * 40, "2" * 40
QUOTAS = {"L-1216C47A": 64.0, "L-DB2E81BA": 64.0, "L-1945791B": 8.0, "L-2C3B7624": 8.0}


@pytest.fixture()
def cdk_json(tmp_path):
    def make(**context):
        p = tmp_path / "cdk.json"
        p.write_text(json.dumps({"app": "x", "context": {"region": "us-east-1", **context}}))
        return ["--cdk-json", str(p)]
    return make


def neuron_image(tags: dict[str, str]) -> dict[str, str]:
    """The kit images built, the Neuron one's AMI tagged as its pipeline tags it."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ami = ec2.register_image(Name="inference-kit-neuron-build-2026-12-01T09-00-00.000Z", Architecture="x86_64",
                             RootDeviceName="/dev/sda1",
                             BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}])["ImageId"]
    if tags:
        ec2.create_tags(Resources=[ami], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return {**PUBLIC, **{n: ami for n in IMAGE_PARAMETERS.values()}}


def _run(argv, capsys, images):
    return run(argv, capsys, sq=quotas(QUOTAS), ssm=ssm_parameters(images), ecr=ecr_images({TAG}, registry="763104351884"))


def test_a_pin_the_neuron_image_does_not_hold_is_a_warning_with_both_commits(aws, cdk_json, capsys):
    images = neuron_image({"kit-model": GEMMA_E2B, "kit-model-revision": OLD})
    rc, out = _run(["--backends", "inf2,trn1", *cdk_json(model=GEMMA_E2B, model_revision=PIN)], capsys, images)
    assert rc == 0, out  # a warning: the boot downloads the pin
    assert f"inf2: {GEMMA_E2B} at {PIN} (pinned)" in out
    warns = [r for r in rows(out, "warn") if "baked weights" in r]
    assert len(warns) == 2 and all(f"holds {GEMMA_E2B} at {OLD[:12]}, not the pinned {PIN[:12]}" in w for w in warns)
    assert all("fix: python -m harness images build neuron --region us-east-1" in w for w in warns)
    assert "inf2       ready (with warnings)" in out


def test_the_pin_the_image_holds_no_warning(aws, cdk_json, capsys):
    images = neuron_image({"kit-model": GEMMA_E2B, "kit-model-revision": PIN})
    rc, out = _run(["--backends", "inf2", *cdk_json(inf2_model_revision=PIN)], capsys, images)
    assert rc == 0 and "baked weights" not in out, out


def test_an_image_built_unpinned_cannot_prove_the_pin(aws, cdk_json, capsys):
    images = neuron_image({"kit-model": GEMMA_E2B, "kit-model-revision": "unpinned"})
    rc, out = _run(["--backends", "inf2", *cdk_json(inf2_model_revision=PIN)], capsys, images)
    assert "built unpinned (its commit is on the instance only), not the pinned" in out


def test_unpinned_backends_show_the_image_commit_or_newest_at_deploy_time(aws, cdk_json, capsys):
    images = neuron_image({"kit-model": GEMMA_E2B, "kit-model-revision": OLD})
    rc, out = _run(["--backends", "sagemaker,g6,inf2", *cdk_json()], capsys, images)
    assert rc == 0, out
    assert f"inf2: {GEMMA_E2B} at {OLD}, baked into image" in out
    assert f"g6: {GEMMA_E2B_INT4}, newest at deploy time" in out  # the public DLAMI: nothing baked
    assert f"sagemaker: {GEMMA_E2B_INT4}, newest at deploy time" in out
    assert "baked weights" not in out
