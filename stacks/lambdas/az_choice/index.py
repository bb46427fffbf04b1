"""Custom resource Custom::AzChoice: the Availability Zone, in this account, that offers the
instance types a backend or an image build needs, and the /24 its subnet gets there.

CloudFormation cannot ask EC2 which AZs offer a type, and AZ names map to different physical
zones in each account, so a template that says "the region's first AZ" fails where that zone
lacks the type ("Unsupported ... in the requested Availability Zone"). This function asks
``DescribeInstanceTypeOfferings`` with ``LocationType=availability-zone`` (EC2 API reference)
in the deploying account and answers:

- ``AvailabilityZone``: the preferred AZ (``PreferredAz``, from ``-c <id>_az``) when it offers
  every type, else, on an update, the AZ chosen before when it still does (no needless
  replacement), else the first AZ by name that offers every type (all of ``InstanceTypes``; an
  image build host list such as c7g.8xlarge,c7g.16xlarge must be launchable in one subnet);
- ``CidrBlock``: ``<CidrPrefix>.<CidrBase + index of the AZ letter>.0/24``, so a move to another
  AZ gets another block and CloudFormation can create the new subnet before deleting the old one;
- ``Offered``: the AZs that offer every type, comma-separated, for the stack outputs.

A type no AZ offers fails the resource with one line naming the type, the region and what to do.
Only ``ec2:DescribeInstanceTypeOfferings`` and ``ec2:DescribeAvailabilityZones`` are called:
both support no resource-level permissions (Service Authorization Reference, Amazon EC2), which
is why the role grants them on "*". Delete does nothing (nothing was created).

The decision itself is kit/az_choice.py (preflight makes the same one); stacks/lambda_code.py packs it
with ../cfn_response.py. boto3 and the standard library are the Lambda Python runtime's.
"""
from __future__ import annotations

from typing import Any, Mapping

from kit.az_choice import ChoiceError, available_zones, choose, cidr_block, offerings

from ..cfn_response import answer, respond


def decide(event: Mapping[str, Any], ec2: Any, region: str) -> tuple[str, dict[str, str]]:
    """(physical id, data) for a Create or Update event. Raises ChoiceError."""
    props = event["ResourceProperties"]
    types = [t for t in props["InstanceTypes"] if t]
    if not types:
        raise ChoiceError("InstanceTypes is empty")
    previous = event.get("PhysicalResourceId", "") if event["RequestType"] == "Update" else ""
    az, fit = choose(region, available_zones(ec2), offerings(ec2, types), props.get("PreferredAz", ""), previous)
    return az, {"AvailabilityZone": az, "Offered": ",".join(fit),
                "CidrBlock": cidr_block(props["CidrPrefix"], int(props["CidrBase"]), az)}


def handler(event: Mapping[str, Any], context: Any, ec2: Any = None, send=respond) -> None:
    def work() -> tuple[str, dict[str, str]]:
        import boto3

        client = ec2 or boto3.client("ec2")
        return decide(event, client, client.meta.region_name)
    return answer(event, work, known=(ChoiceError,), send=send)
