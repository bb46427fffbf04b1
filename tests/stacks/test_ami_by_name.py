"""Custom::AmiByName (stacks/lambdas/ami_by_name): the SDK 2.28 DLAMI's id by its exact name."""
from __future__ import annotations

from stacks.lambdas.ami_by_name.index import handler

EVENT = {"RequestType": "Create", "StackId": "s", "RequestId": "r", "LogicalResourceId": "BuildParent",
         "ResponseURL": "https://example.invalid", "ResourceProperties": {"Name": "Deep Learning AMI Neuron (Ubuntu 24.04) 20260227"}}


class FakeEc2:
    class meta:  # noqa: N801 - mimics the boto3 client attribute of that name
        region_name = "us-east-1"

    def __init__(self, images):
        self.images, self.calls = images, []

    def describe_images(self, **kw):
        self.calls.append(kw)
        return {"Images": self.images}


def run(images, event=EVENT):
    sent, ec2 = [], FakeEc2(images)
    handler(event, None, ec2=ec2, send=lambda *a: sent.append(a))
    return sent[0], ec2


def test_answers_the_image_id_asking_amazon_owned_exact_name_deprecated_included():
    (event, status, physical, data, *_), ec2 = run([{"ImageId": "ami-0aaa", "CreationDate": "2026-02-27T00:00:00Z"}])
    assert (status, physical, data) == ("SUCCESS", "ami-0aaa", {"ImageId": "ami-0aaa"})
    (kw,) = ec2.calls
    assert kw["Owners"] == ["amazon"] and kw["IncludeDeprecated"] is True
    assert {"Name": "name", "Values": ["Deep Learning AMI Neuron (Ubuntu 24.04) 20260227"]} in kw["Filters"]


def test_no_such_ami_fails_in_one_line_saying_what_to_do():
    (event, status, physical, data, reason), _ = run([])
    assert status == "FAILED" and "\n" not in reason
    assert "Deep Learning AMI Neuron (Ubuntu 24.04) 20260227" in reason and "us-east-1" in reason
    assert "neuron_parent_image=ami-" in reason


def test_delete_does_nothing():
    (event, status, *_), ec2 = run([], {**EVENT, "RequestType": "Delete", "PhysicalResourceId": "ami-0aaa"})
    assert status == "SUCCESS" and ec2.calls == []
