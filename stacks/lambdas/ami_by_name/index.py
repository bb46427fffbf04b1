"""Custom resource Custom::AmiByName: the id, in this region, of the Amazon-owned AMI with an exact name.

Why: the Neuron image of SDK 2.28 starts from the DLAMI released with that SDK, and no SSM
parameter names it ("Currently, SSM parameters support finding the latest DLAMI ID for each DLAMI
type", aws-neuron/aws-neuron-sdk deploy/environments/dlami.rst): only its name stays the same in
every region (kit/pins.py NeuronLine.parent_ami_name). CloudFormation cannot look an AMI up by
name, so this function asks ``DescribeImages`` with ``Owners=[amazon]``, an exact ``name`` filter
and ``IncludeDeprecated`` (an old DLAMI is deprecated after a while and left out of results
otherwise; EC2 API reference, DescribeImages) at deploy time, in the deploying account, and
answers ``ImageId``. No AMI by that name fails the resource with one line naming the name, the
region and what to do; several (never seen: names are unique per owner) take the newest.

``ec2:DescribeImages`` supports no resource-level permissions (Service Authorization Reference,
Amazon EC2), hence "*" in the role. Delete does nothing (nothing was created).
Self-contained but for ../cfn_response.py, packed beside it (stacks/lambda_code.py).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..cfn_response import answer, respond


class AmiNotFound(Exception):
    """No AMI found; str(e) is the one line CloudFormation shows."""


def find(ec2: Any, name: str, region: str) -> str:
    images = ec2.describe_images(Owners=["amazon"], IncludeDeprecated=True,
                                 Filters=[{"Name": "name", "Values": [name]},
                                          {"Name": "state", "Values": ["available"]}]).get("Images", [])
    if not images:
        raise AmiNotFound(f"no Amazon-owned AMI named {name!r} in {region}; build on another one with "
                           "cdk deploy <the Neuron image stack> -c neuron_parent_image=ami-... (docs/images.md)")
    return max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"]


def handler(event: Mapping[str, Any], context: Any, ec2: Any = None, send=respond) -> None:
    def work() -> tuple[str, dict[str, str]]:
        import boto3

        client = ec2 or boto3.client("ec2")
        image = find(client, event["ResourceProperties"]["Name"], client.meta.region_name)
        return image, {"ImageId": image}
    return answer(event, work, known=(AmiNotFound,), send=send)
