"""Which images a deploy checks (the rule: docs/stacks.md, "Which images a deploy checks"): the
configured deployments' images, every one in every backend stack, so the configuration decides the
scope, not the stacks the CLI was given.

Two contexts the workshop path meets. An attendee's (the organizer's ``cdk.context.json``: region,
``backends=inf2``, ``inf2_ami``) synthesizes an Inf2Stack whose check covers only that shared AMI.
The repository's defaults (every backend, no image built) still guard ``cdk deploy --all``: every
billable backend stack's check lists every configured image, so the first one CloudFormation
reaches in an account without them refuses before anything billable exists. The handler's answers
are replayed through botocore's Stubber (tests/stacks/test_images_ready.py says the shapes' sources).

Which image stacks the app makes follows the same configuration: none for an image family whose
every selected backend boots an AMI given by id, so the attendee's ``cdk deploy --all`` creates no
image stack (and no retained KMS key); ``python -m harness images build`` undoes a given AMI for
its own deploy, so the organizer's build always has its stack.
"""
from __future__ import annotations

import pytest

from kit.catalog import BACKENDS
from stacks.lambdas.images_ready import index
from tests.stacks.conftest import synth
from tests.stacks.test_image_guard import check_of
from tests.stacks.test_images_ready import Clients, _available

SHARED = "ami-0123456789abcdef0"  # the organizer's Neuron AMI, shared with the attendee's account
SM75 = "/imagebuilder/inference-kit/ami/vllm-sm75"
NEURON = "/imagebuilder/inference-kit/ami/neuron-sdk228"
BILLABLE_STACKS = tuple(b.stack_name for b in BACKENDS.values() if b.instance_type)


def images_of(template: dict) -> list[dict]:
    return check_of(template)[1]["Properties"]["Images"]


@pytest.fixture(scope="module")
def attendee(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("attendee"), region="us-east-1", backends="inf2", inf2_ami=SHARED)


def test_an_attendee_context_checks_only_the_shared_neuron_ami(attendee):
    t = attendee.templates["Inf2Stack"]
    check, resource = check_of(t)
    (entry,) = resource["Properties"]["Images"]
    assert entry["Image"] == "inf2_ami" and entry["Ami"] == SHARED and entry["Parameter"] == ""
    assert entry["Key"] == "BootAmi" and entry["Stacks"] == "Inf2Stack"
    assert resource["Properties"]["Backends"] == "inf2"
    _, instance = attendee.one("Inf2Stack", "AWS::EC2::Instance")
    assert instance["Properties"]["ImageId"] == {"Fn::GetAtt": [check, "BootAmi"]}
    # No image parameter to read: the check's role may not read one.
    policies = [p["Properties"]["PolicyDocument"] for p in attendee.resources("Inf2Stack", "AWS::IAM::Policy").values()]
    assert "ssm:GetParameters" not in str(policies)


def test_the_attendee_check_passes_on_the_shared_ami_alone(attendee):
    """In the attendee's account no kit parameter exists; the check asks EC2 for the shared AMI only
    (a Stubber with no SSM answer would fail on any SSM call)."""
    c = Clients()
    c.stub("ec2").add_response("describe_images", _available(SHARED, owner="111122223333", state="available"),
                               {"ImageIds": [SHARED]})
    got = index.check(images_of(attendee.templates["Inf2Stack"]), ["inf2"], c)
    assert got == {"BootAmi": SHARED}
    c.done()


@pytest.mark.parametrize("stack", BILLABLE_STACKS)
def test_the_default_context_with_no_images_refuses_deploy_all_in_any_backend_stack(kit, stack):
    """Whichever billable stack `cdk deploy --all` reaches first, its check names both missing images
    (tests/stacks/test_image_guard.py: every billable resource waits for it)."""
    images = images_of(kit.templates[stack])
    assert {i["Image"] for i in images} >= {"vllm-sm75", "neuron"}
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [], "InvalidParameters": [NEURON, SM75]},
                               {"Names": [NEURON, SM75]})
    with pytest.raises(index.NotReady) as e:
        index.check(images, kit.config.backend_ids, c)
    lines = str(e.value).splitlines()
    assert lines[0] == "2 machine images are missing; nothing billable was created"
    assert lines[-1] == "or deploy without g5g, inf2, trn1: -c backends=bedrock,sagemaker,g6"
    c.done()


def test_an_ami_given_without_backends_is_refused_in_one_line_naming_the_narrower_backends(tmp_path):
    """`-c inf2_ami=...` alone (no cdk.context.json with backends): every backend is configured, so
    Inf2Stack's check also covers g5g's and trn1's images; in the attendee's account they do not
    exist, and the refusal's last line names the -c backends= that deploys what it can."""
    k = synth(tmp_path, inf2_ami=SHARED)
    images = images_of(k.templates["Inf2Stack"])
    assert [i["Image"] for i in images] == ["vllm-sm75", "inf2_ami", "neuron"]
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [], "InvalidParameters": [NEURON, SM75]},
                               {"Names": [NEURON, SM75]})
    c.stub("ec2").add_response("describe_images", _available(SHARED, owner="111122223333"), {"ImageIds": [SHARED]})
    with pytest.raises(index.NotReady) as e:
        index.check(images, k.config.backend_ids, c)
    lines = str(e.value).splitlines()
    assert lines[0] == "2 machine images are missing; nothing billable was created"
    assert [ln.split(":")[0] for ln in lines[1:3]] == ["image vllm-sm75 (us-east-1)", "image neuron (us-east-1)"]
    assert lines[3] == "or deploy without g5g, trn1: -c backends=bedrock,sagemaker,g6,inf2"
    assert len(lines) == 4
    c.done()


DEFAULT_IMAGE_STACKS = {"VllmCudaImageStack", "VllmSm75ImageStack", "NeuronImageStack"}


def test_an_attendee_context_synthesizes_no_image_stack(attendee):
    """`cdk deploy --all` with the handout: the network and the backend, no NeuronImageStack (its
    KMS key is retained and billed after `cdk destroy --all`)."""
    assert set(attendee.stacks) == {"NetworkStack", "Inf2Stack"}


def test_the_default_context_synthesizes_every_image_stack(kit):
    assert DEFAULT_IMAGE_STACKS <= set(kit.stacks)


@pytest.mark.parametrize("context, stacks", [
    ({"backends": "inf2,trn1", "inf2_ami": SHARED}, {"NeuronImageStack"}),  # trn1 still boots the kit's image
    ({"backends": "inf2,trn1", "inf2_ami": SHARED, "trn1_ami": SHARED}, set()),
    ({"backends": "g5g,g6,inf2", "g6_ami": SHARED}, {"VllmSm75ImageStack", "NeuronImageStack"}),
    ({"backends": "inf2", "inf2_ami": ""}, {"NeuronImageStack"}),  # empty: no AMI given (kit/config.py)
])
def test_an_image_stack_is_left_out_only_when_every_backend_booting_it_has_an_ami(context, stacks):
    from kit.config import parse
    from kit.image_needs import pipeline_images
    from kit.image_facts import IMAGE_STACKS as NAMES
    from stacks.images import image_specs

    config = parse({"region": "us-east-1", **context})
    assert pipeline_images(config) == set(image_specs(config))
    assert {NAMES[i] for i in pipeline_images(config)} == stacks


def test_images_build_gets_its_stack_whatever_ami_the_organizers_context_names(tmp_path):
    """The organizer's own cdk.context.json names the AMI shared last time (docs/workshop.md): the
    build's deploy passes `-c inf2_ami=`, and the app then has NeuronImageStack again."""
    from harness.account.images import _stack_context

    ctx = {"region": "us-east-1", "backends": "inf2", "inf2_ami": SHARED}
    extra = _stack_context(ctx, "neuron", "us-east-1")
    assert extra == ["inf2_ami="]
    k = synth(tmp_path, **{**ctx, **dict(e.split("=", 1) for e in extra)})
    assert "NeuronImageStack" in k.stacks
    assert _stack_context({"region": "us-east-1", "backends": "inf2"}, "neuron") == []  # nothing to undo
