"""No deploy of any selection starts billing and then fails on a missing image.

What the templates must show (the deploy-time half is tests/stacks/test_images_ready.py): every
billable resource of every backend stack (EC2 instance; SageMaker model, endpoint config,
endpoint) waits for Custom::ImagesReady, and that check lists every image the configuration
boots, with the command that builds it. The kit's own images are no longer SSM-typed stack
parameters, which CloudFormation would refuse at change-set creation with its own message, one
stack at a time, after other stacks were already up (see stacks/image_guard.py)."""
from __future__ import annotations

import copy

import pytest

from kit.catalog import BACKEND_IDS, BACKENDS
from tests.stacks.conftest import config_error, synth
from tests.stacks.test_readiness_gate import depends_on

BILLABLE = {"AWS::EC2::Instance", "AWS::SageMaker::Endpoint", "AWS::SageMaker::EndpointConfig",
            "AWS::SageMaker::Model"}
# Every backend that runs an instance or an endpoint (Bedrock bills per token and has none), from
# the catalog, so a new row is checked too.
BACKEND_STACKS = tuple(b.stack_name for b in BACKENDS.values() if b.instance_type)
# Image families that boot only the kit's own image, and that image (kit/image_families.py: g5g and
# Neuron boot only the pipelines' AMIs; the gpu-x86 family boots the public DLAMI by default).
KIT_IMAGE = {"gpu-arm64": "vllm-sm75", "neuron": "neuron"}


def check_of(template: dict) -> tuple[str, dict]:
    found = [(k, v) for k, v in template["Resources"].items() if v["Type"] == "Custom::ImagesReady"]
    assert len(found) == 1, [k for k, _ in found]
    return found[0]


def ungated_billable(template: dict) -> list[str]:
    """Billable resources CloudFormation could create before the image check succeeded."""
    check, _ = check_of(template)
    return sorted(lid for lid, r in template["Resources"].items()
                  if r["Type"] in BILLABLE and check not in depends_on(template, lid))


@pytest.mark.parametrize("stack", BACKEND_STACKS)
def test_every_billable_resource_waits_for_the_image_check(kit, stack):
    t = kit.templates[stack]
    assert any(r["Type"] in BILLABLE for r in t["Resources"].values())
    assert ungated_billable(t) == []


def test_the_gate_test_can_fail():
    """Remove the check from an instance's dependencies and the test above reports it."""
    t = {"Resources": {
        "Check": {"Type": "Custom::ImagesReady", "Properties": {}},
        "Server": {"Type": "AWS::EC2::Instance", "DependsOn": ["Check"], "Properties": {"ImageId": "ami-1"}}}}
    assert ungated_billable(t) == []
    broken = copy.deepcopy(t)
    del broken["Resources"]["Server"]["DependsOn"]
    assert ungated_billable(broken) == ["Server"]


@pytest.mark.parametrize("stack", BACKEND_STACKS)
def test_the_check_lists_every_configured_image_with_its_build_command(kit, stack):
    _, check = check_of(kit.templates[stack])
    images = {i["Image"]: i for i in check["Properties"]["Images"]}
    assert set(images) == {"vllm-sm75", "neuron"}  # g6 boots the public DLAMI by default
    assert images["vllm-sm75"]["Parameter"] == "/imagebuilder/inference-kit/ami/vllm-sm75"
    assert images["vllm-sm75"]["Build"] == "build it: python -m harness images build vllm-sm75 --region us-east-1"
    assert images["neuron"]["Stacks"] == ", ".join(b.stack_name for b in BACKENDS.values() if b.image == "neuron")
    assert check["Properties"]["Backends"] == ",".join(BACKEND_IDS)  # the default: every catalog row
    assert check["Properties"]["CheckedAt"] == "2026-03-01T12:00:30+00:00"  # the synth's clock: re-run per deploy


@pytest.mark.parametrize("stack,image", [(b.stack_name, KIT_IMAGE[b.image]) for b in BACKENDS.values()
                                         if b.image in KIT_IMAGE])
def test_kit_images_boot_from_the_check_not_from_a_stack_parameter(kit, stack, image):
    t = kit.templates[stack]
    check, props = check_of(t)
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    assert instance["Properties"]["ImageId"] == {"Fn::GetAtt": [check, "BootAmi"]}
    own = [i for i in props["Properties"]["Images"] if i["Key"] == "BootAmi"]
    assert [i["Image"] for i in own] == [image]
    ssm_typed = [p.get("Default") for p in t.get("Parameters", {}).values()
                 if p.get("Type", "").startswith("AWS::SSM::Parameter::Value")]
    assert not [d for d in ssm_typed if str(d).startswith("/imagebuilder/")]


def test_g6_still_boots_the_public_dlami_parameter(kit):
    t = kit.templates["G6Stack"]
    _, instance = kit.one("G6Stack", "AWS::EC2::Instance")
    param = t["Parameters"][instance["Properties"]["ImageId"]["Ref"]]
    assert param["Default"].startswith("/aws/service/deeplearning/ami/x86_64/")


def test_the_check_may_read_exactly_the_image_parameters(kit):
    t = kit.templates["SageMakerStack"]
    policies = [r for r in t["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
                and any(s.get("Sid") == "ReadImageParameters" for s in r["Properties"]["PolicyDocument"]["Statement"])]
    (stmt,) = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
               if s.get("Sid") == "ReadImageParameters"]
    assert stmt["Action"] == "ssm:GetParameters"
    text = str(stmt["Resource"])
    assert ":parameter/imagebuilder/inference-kit/ami/vllm-sm75" in text
    assert ":parameter/imagebuilder/inference-kit/ami/neuron-sdk228" in text


def test_an_ami_given_by_id_is_checked_and_booted(tmp_path):
    k = synth(tmp_path, backends="g5g", g5g_ami="ami-0123456789abcdef0")
    check, props = check_of(k.templates["G5gStack"])
    (entry,) = props["Properties"]["Images"]
    assert entry["Image"] == "g5g_ami" and entry["Ami"] == "ami-0123456789abcdef0" and entry["Key"] == "BootAmi"
    assert "harness images share --account <this account> --ami ami-0123456789abcdef0" in entry["Build"]
    _, instance = k.one("G5gStack", "AWS::EC2::Instance")
    assert instance["Properties"]["ImageId"] == {"Fn::GetAtt": [check, "BootAmi"]}
    # g5g boots the given AMI, so no pipeline stack (`images build` undoes the AMI for its deploy:
    # tests/stacks/test_image_check_scope.py)
    assert "VllmSm75ImageStack" not in k.stacks


@pytest.mark.parametrize("value", ["ami-123", "ami-0123456789ABCDEF0", "0123456789abcdef0", "ami-0123456789abcdef01"])
def test_a_bad_ami_id_is_one_line_even_for_a_backend_not_selected(value):
    msg = config_error(backends="g6", inf2_ami=value)
    assert msg.startswith(f"inf2_ami={value!r} is not an AMI id")


@pytest.mark.parametrize("context", [{}, {"backends": "g6"}, {"backends": "inf2", "neuron_sdk": "2.31"},
                                     {"backends": "sagemaker,bedrock"}, {"backends": "g5g,trn1"}])
def test_pipeline_images_names_the_image_stacks_the_app_builds(context):
    from kit.config import parse
    from kit.image_needs import pipeline_images
    from stacks.images import image_specs

    config = parse({"region": "us-east-1", **context})
    assert pipeline_images(config) == set(image_specs(config))
