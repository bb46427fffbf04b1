"""Custom::ImagesReady (stacks/lambdas/images_ready/index.py): the deploy-time check that refuses a
backend stack before anything billable exists when a configured machine image is missing.

SSM and EC2 answers are replayed through botocore's Stubber, which validates each request's
parameters and each response's shape against the service model. Response shapes follow the SSM
API reference (GetParameters: ``Parameters`` with Name/Type/Value/Version/DataType, names not
found in ``InvalidParameters``) and the EC2 API reference (DescribeImages; an AMI not visible to
the caller fails with ``InvalidAMIID.NotFound``)."""
from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber

from stacks.lambdas.images_ready import index

SM75 = "/imagebuilder/inference-kit/ami/vllm-sm75"
NEURON = "/imagebuilder/inference-kit/ami/neuron-sdk228"


def _entry(image, param=None, ami=None, key="", stacks="G5gStack", ids="g5g", region="us-east-1"):
    return {"Image": image, "Region": region, "Parameter": param or "", "Ami": ami or "", "Stacks": stacks,
            "BackendIds": ids, "Key": key,
            "Build": f"build it: python -m harness images build {image} --region {region}"}


class Clients:
    """One stubbed client per (service, region), activated for the test."""

    def __init__(self):
        self.clients, self.stubs = {}, {}

    def __call__(self, service, region):
        return self.get(service, region)

    def get(self, service, region):
        if (service, region) not in self.clients:
            c = boto3.client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x")
            self.clients[(service, region)] = c
            self.stubs[(service, region)] = Stubber(c)
            self.stubs[(service, region)].activate()
        return self.clients[(service, region)]

    def stub(self, service, region="us-east-1"):
        self.get(service, region)
        return self.stubs[(service, region)]

    def done(self):
        for s in self.stubs.values():
            s.assert_no_pending_responses()


def _param(name, value):
    return {"Name": name, "Type": "String", "Value": value, "Version": 3, "DataType": "aws:ec2:image",
            "LastModifiedDate": dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc),
            "ARN": f"arn:aws:ssm:us-east-1:123456789012:parameter{name}"}


def _available(ami, owner="123456789012", state="available"):
    """DescribeImages' answer for one of the account's AMIs (EC2 API reference, Image)."""
    return {"Images": [{"ImageId": ami, "State": state, "OwnerId": owner, "Architecture": "arm64",
                        "Name": "inference-kit-vllm-sm75-gpu-test-2026-11-30T12-00-00.000Z", "Public": False}]}


def test_every_missing_image_is_one_line_with_its_build_command_and_the_rest_can_deploy():
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [], "InvalidParameters": [NEURON, SM75]},
                               {"Names": [NEURON, SM75]})
    images = [_entry("vllm-sm75", SM75, key="BootAmi"),
              _entry("neuron", NEURON, stacks="Inf2Stack, Trn1Stack", ids="inf2,trn1")]
    with pytest.raises(index.NotReady) as e:
        index.check(images, ["bedrock", "sagemaker", "g6", "g5g", "inf2", "trn1"], c)
    lines = str(e.value).splitlines()
    assert lines[0] == "2 machine images are missing; nothing billable was created"
    assert lines[1] == (f"image vllm-sm75 (us-east-1): {SM75} does not exist (G5gStack boots it); "
                        "build it: python -m harness images build vllm-sm75 --region us-east-1")
    assert lines[2].startswith(f"image neuron (us-east-1): {NEURON} does not exist (Inf2Stack, Trn1Stack boot it)")
    assert lines[3] == "or deploy without g5g, inf2, trn1: -c backends=bedrock,sagemaker,g6"
    c.done()


def test_present_images_pass_and_the_stack_gets_its_own_ami():
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [_param(NEURON, "ami-0a1b2c3d4e5f60718"),
                                                                 _param(SM75, "ami-0123456789abcdef0")]},
                                               {"Names": [NEURON, SM75]})
    c.stub("ec2").add_response("describe_images", _available("ami-0123456789abcdef0"),
                               {"ImageIds": ["ami-0123456789abcdef0"]})
    c.stub("ec2").add_response("describe_images", _available("ami-0a1b2c3d4e5f60718"),
                               {"ImageIds": ["ami-0a1b2c3d4e5f60718"]})
    got = index.check([_entry("vllm-sm75", SM75), _entry("neuron", NEURON, key="BootAmi")], ["g5g", "inf2"], c)
    assert got == {"BootAmi": "ami-0a1b2c3d4e5f60718"}
    c.done()


def test_a_parameter_whose_ami_was_deregistered_is_a_missing_image():
    """The parameter outlives its AMI (Image Builder writes it, no stack owns it; harness.account.leftovers
    lists the AMI's snapshots as billing and the parameter as free). Passing on the parameter
    alone let the instance's CreateInstance fail on the AMI after other stacks were up."""
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [_param(SM75, "ami-0123456789abcdef0")]},
                               {"Names": [SM75]})
    c.stub("ec2").add_client_error("describe_images", "InvalidAMIID.NotFound",
                                   "The image id '[ami-0123456789abcdef0]' does not exist", 400,
                                   expected_params={"ImageIds": ["ami-0123456789abcdef0"]})
    with pytest.raises(index.NotReady) as e:
        index.check([_entry("vllm-sm75", SM75, key="BootAmi")], ["g6", "g5g"], c)
    assert str(e.value).splitlines()[1:] == [
        f"image vllm-sm75 (us-east-1): {SM75} names ami-0123456789abcdef0, which is not visible to this account "
        "(deregistered?) (G5gStack boots it); build it: python -m harness images build vllm-sm75 --region us-east-1",
        "or deploy without g5g: -c backends=g6"]
    c.done()


def test_a_parameter_whose_ami_cannot_launch_names_its_state():
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [_param(SM75, "ami-0123456789abcdef0")]},
                               {"Names": [SM75]})
    c.stub("ec2").add_response("describe_images", _available("ami-0123456789abcdef0", state="disabled"),
                               {"ImageIds": ["ami-0123456789abcdef0"]})
    with pytest.raises(index.NotReady) as e:
        index.check([_entry("vllm-sm75", SM75, key="BootAmi")], ["g5g"], c)
    assert f"{SM75} names ami-0123456789abcdef0, which is disabled (G5gStack boots it)" in str(e.value)
    c.done()


def test_an_explicit_ami_not_shared_with_this_account_is_refused():
    c = Clients()
    c.stub("ec2").add_client_error("describe_images", "InvalidAMIID.NotFound",
                                   "The image id '[ami-0123456789abcdef0]' does not exist", 400,
                                   expected_params={"ImageIds": ["ami-0123456789abcdef0"]})
    with pytest.raises(index.NotReady) as e:
        index.check([_entry("g5g_ami", ami="ami-0123456789abcdef0", key="BootAmi")], ["g5g"], c)
    assert "ami-0123456789abcdef0 is not visible to this account (G5gStack boots it)" in str(e.value)
    c.done()


def test_an_explicit_ami_that_is_available_is_handed_to_the_instance():
    c = Clients()
    c.stub("ec2").add_response("describe_images", {"Images": [{
        "ImageId": "ami-0123456789abcdef0", "State": "available", "OwnerId": "111122223333",
        "Name": "inference-kit-vllm-sm75-gpu-test-2026-11-30T12-00-00.000Z", "Architecture": "arm64",
        "Public": False}]}, {"ImageIds": ["ami-0123456789abcdef0"]})
    got = index.check([_entry("g5g_ami", ami="ami-0123456789abcdef0", key="BootAmi")], ["g5g"], c)
    assert got == {"BootAmi": "ami-0123456789abcdef0"}
    c.done()


def test_handler_answers_failed_with_the_lines_and_success_with_the_ami():
    sent = []
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [], "InvalidParameters": [SM75]}, {"Names": [SM75]})
    ev = {"RequestType": "Create", "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/G6Stack/x",
          "RequestId": "r", "LogicalResourceId": "ImagesReady", "ResponseURL": "http://unused",
          "ResourceProperties": {"Images": [_entry("vllm-sm75", SM75)], "Backends": "g6,g5g", "CheckedAt": "t"}}
    index.handler(ev, None, client=c, send=lambda e, status, pid, data, reason="": sent.append((status, reason)))
    assert sent[0][0] == "FAILED" and "or deploy without g5g: -c backends=g6" in sent[0][1]
    sent.clear()
    index.handler({**ev, "RequestType": "Delete", "PhysicalResourceId": "images-ready"}, None, client=c,
                  send=lambda e, status, pid, data, reason="": sent.append((status, reason)))
    assert sent == [("SUCCESS", "")]


def test_a_check_that_cannot_run_refuses_rather_than_lets_billing_start():
    sent = []
    c = Clients()
    c.stub("ssm").add_client_error("get_parameters", "AccessDeniedException", "not authorized", 400)
    ev = {"RequestType": "Update", "StackId": "s", "RequestId": "r", "LogicalResourceId": "l", "ResponseURL": "u",
          "PhysicalResourceId": "images-ready",
          "ResourceProperties": {"Images": [_entry("vllm-sm75", SM75)], "Backends": "g5g", "CheckedAt": "t"}}
    index.handler(ev, None, client=c, send=lambda e, status, pid, data, reason="": sent.append((status, reason)))
    assert sent[0][0] == "FAILED" and "AccessDeniedException" in sent[0][1]


def test_the_templates_check_and_harness_deploy_print_the_same_line():
    """The Lambda carries no kit code (its asset is the handler alone): the line it builds from the
    properties stacks/image_guard.py writes is the one kit/image_needs.py builds for harness.account.deploy."""
    from kit.config import parse
    from kit.image_needs import image_needs
    from stacks.image_guard import properties

    config = parse({"region": "us-east-1"})
    needs = image_needs(config)
    props = properties(needs, None, config.backend_ids, "t")
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [],
                                                  "InvalidParameters": sorted(n.parameter for n in needs)},
                               {"Names": sorted(n.parameter for n in needs)})
    with pytest.raises(index.NotReady) as e:
        index.check(props["Images"], list(config.backend_ids), c)
    assert str(e.value).splitlines()[1:1 + len(needs)] == [n.line(f"{n.parameter} does not exist") for n in needs]


def _event(request, checked_at, old_checked_at=None, physical=None):
    ev = {"RequestType": request, "StackId": "s", "RequestId": "r", "LogicalResourceId": "l", "ResponseURL": "u",
          "ResourceProperties": {"Images": [_entry("vllm-sm75", SM75, key="BootAmi")], "Backends": "g5g",
                                 "CheckedAt": checked_at}}
    if old_checked_at:
        ev["OldResourceProperties"] = {**ev["ResourceProperties"], "CheckedAt": old_checked_at}
    if physical:
        ev["PhysicalResourceId"] = physical
    return ev


def test_the_ami_handed_out_is_kept_in_the_physical_id():
    sent = []
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [_param(SM75, "ami-0123456789abcdef0")]},
                               {"Names": [SM75]})
    c.stub("ec2").add_response("describe_images", _available("ami-0123456789abcdef0"),
                               {"ImageIds": ["ami-0123456789abcdef0"]})
    index.handler(_event("Create", "2026-12-01T09:00:00+00:00"), None, client=c,
                  send=lambda e, status, pid, data, reason="": sent.append((status, pid, data)))
    assert sent == [("SUCCESS", "images-ready/ami-0123456789abcdef0", {"BootAmi": "ami-0123456789abcdef0"})]


def test_a_rollback_never_fails_and_restores_the_previous_ami():
    """After a failed update CloudFormation sends an Update with the previous (older) properties; the
    image may be gone by then. Failing it would leave the stack UPDATE_ROLLBACK_FAILED."""
    sent = []
    c = Clients()
    ev = _event("Update", "2026-12-01T09:00:00+00:00", old_checked_at="2026-12-02T09:00:00+00:00",
                physical="images-ready/ami-0123456789abcdef0")
    index.handler(ev, None, client=c, send=lambda e, status, pid, data, reason="": sent.append((status, pid, data)))
    assert sent == [("SUCCESS", "images-ready/ami-0123456789abcdef0", {"BootAmi": "ami-0123456789abcdef0"})]
    c.done()
    # ... while the same missing image on a forward update (newer properties) is refused
    sent.clear()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [], "InvalidParameters": [SM75]}, {"Names": [SM75]})
    fwd = _event("Update", "2026-12-02T09:00:00+00:00", old_checked_at="2026-12-01T09:00:00+00:00",
                 physical="images-ready/ami-0123456789abcdef0")
    index.handler(fwd, None, client=c, send=lambda e, status, pid, data, reason="": sent.append((status, pid, data)))
    assert sent[0][0] == "FAILED"


# SSM may deny a request for a parameter that does not exist, naming the region's wildcard resource
# (aws-solutions/aws-control-tower-customizations#208, a role allowed ssm:GetParameter on
# parameter/* asking for a name that did not exist). This function's role is allowed exactly the
# image parameters, so a fresh account's first deploy would refuse with an access error naming
# no image and no build command.
def _wildcard_denial(op="GetParameters"):
    return (f"User: arn:aws:sts::123456789012:assumed-role/G6Stack-ImagesReadyRole1A2B3C4D-AbCdEfGh/G6Stack-"
            f"ImagesReadyFunction is not authorized to perform: ssm:{op} on resource: "
            f"arn:aws:ssm:us-east-1:123456789012:* because no identity-based policy allows the ssm:{op} action")


def test_a_denial_on_the_wildcard_resource_reads_as_an_image_not_built():
    c = Clients()
    ssm = c.stub("ssm")
    ssm.add_client_error("get_parameters", "AccessDeniedException", _wildcard_denial(), 400,
                         expected_params={"Names": [NEURON, SM75]})
    ssm.add_client_error("get_parameters", "AccessDeniedException", _wildcard_denial(), 400,
                         expected_params={"Names": [NEURON]})
    ssm.add_response("get_parameters", {"Parameters": [_param(SM75, "ami-0123456789abcdef0")]}, {"Names": [SM75]})
    c.stub("ec2").add_response("describe_images", _available("ami-0123456789abcdef0"),
                               {"ImageIds": ["ami-0123456789abcdef0"]})
    images = [_entry("vllm-sm75", SM75), _entry("neuron", NEURON, stacks="Inf2Stack, Trn1Stack", ids="inf2,trn1")]
    with pytest.raises(index.NotReady) as e:
        index.check(images, ["g6", "g5g", "inf2", "trn1"], c)
    assert str(e.value).splitlines() == [
        "1 machine image is missing; nothing billable was created",
        f"image neuron (us-east-1): {NEURON} does not exist (Inf2Stack, Trn1Stack boot it); "
        "build it: python -m harness images build neuron --region us-east-1",
        "or deploy without inf2, trn1: -c backends=g6,g5g"]
    c.done()


def test_a_denial_naming_the_parameter_itself_is_still_an_access_error():
    c = Clients()
    c.stub("ssm").add_client_error(
        "get_parameters", "AccessDeniedException",
        _wildcard_denial().replace("arn:aws:ssm:us-east-1:123456789012:*", f"arn:aws:ssm:us-east-1:123456789012:parameter{SM75}"),
        400, expected_params={"Names": [SM75]})
    with pytest.raises(Exception) as e:
        index.check([_entry("vllm-sm75", SM75)], ["g5g"], c)
    assert not isinstance(e.value, index.NotReady) and "AccessDeniedException" in str(e.value)


def test_a_rollback_hands_back_the_ami_given_before_not_a_newer_one_behind_the_parameter():
    """A build published while the failed update ran: the parameter now names a newer AMI. The
    restored template must get the AMI its running instance was launched from, or CloudFormation
    would replace that instance during the rollback. A rollback asks AWS nothing."""
    sent = []
    c = Clients()
    c.stub("ssm").add_response("get_parameters", {"Parameters": [_param(SM75, "ami-0fedcba9876543210")]},
                               {"Names": [SM75]})
    c.stub("ec2").add_response("describe_images", _available("ami-0fedcba9876543210"),
                               {"ImageIds": ["ami-0fedcba9876543210"]})
    ev = _event("Update", "2026-12-01T09:00:00+00:00", old_checked_at="2026-12-02T09:00:00+00:00",
                physical="images-ready/ami-0123456789abcdef0")
    index.handler(ev, None, client=c, send=lambda e, status, pid, data, reason="": sent.append((status, pid, data)))
    assert sent == [("SUCCESS", "images-ready/ami-0123456789abcdef0", {"BootAmi": "ami-0123456789abcdef0"})]


# The response body's limit: "The total size of the response body can't exceed 4096 bytes"
# (CloudFormation User Guide, "Custom resource response objects"). A refusal is one line per
# missing image with its build command at the end; a flat 1000-character cut dropped the last
# lines (several regions' images) while the body had room for them.
_EV = {"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/G6Stack/1a2b3c4d-5678-90ab-cdef-1234567890ab",
       "RequestId": "a1b2c3d4-5678-90ab-cdef-EXAMPLE11111", "LogicalResourceId": "ImagesReadyCheckE1DDB8EE"}


def test_a_long_refusal_arrives_whole_when_it_fits_the_body_limit():
    import json

    from stacks.lambdas import cfn_response

    reason = "\n".join([f"image neuron (region-{i}): /imagebuilder/inference-kit/ami/neuron-sdk228 does not exist "
                        f"(Inf2Stack, Trn1Stack boot it); build it: python -m harness images build neuron --region "
                        f"region-{i}" for i in range(10)])
    assert 1000 < len(reason) < 3000
    got = cfn_response.body(_EV, "FAILED", "images-ready", {}, reason)
    assert len(got) <= 4096 and json.loads(got)["Reason"] == reason


def test_a_refusal_too_long_for_the_body_keeps_whole_lines_and_says_how_many_are_left():
    import json

    from stacks.lambdas import cfn_response

    lines = [f"image x{i} (us-east-1): " + "y" * 180 for i in range(40)]
    got = cfn_response.body(_EV, "FAILED", "images-ready", {}, "\n".join(lines))
    assert len(got) <= 4096
    shown = json.loads(got)["Reason"].splitlines()
    assert shown[:-1] == lines[:len(shown) - 1] and shown[-1] == f"(... {40 - len(shown) + 1} more lines)"
    one_line = cfn_response.body(_EV, "FAILED", "images-ready", {}, "\u00e9" * 5000)  # escapes: 6 bytes each
    assert len(one_line) <= 4096 and json.loads(one_line)["Reason"].startswith("\u00e9")
