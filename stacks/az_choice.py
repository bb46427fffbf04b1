"""A public subnet in an Availability Zone that offers the instance types it will hold.

Used by every EC2 backend (stacks/inference_instance.py) and every image pipeline's build host
(stacks/images.py), so nothing is pinned to the region's first AZ (``Fn::Select [0, Fn::GetAZs]``),
which in a given account may not offer inf2, trn1, g5g or the c7g build hosts.

How: a custom resource (``Custom::AzChoice``, stacks/lambdas/az_choice/index.py) asks EC2's
``DescribeInstanceTypeOfferings`` in the deploying account at deploy time, honours the user's
``-c <id>_az`` when that AZ offers the types (and fails with one line listing the AZs that do when
it does not), and returns the AZ and a /24 for it; the subnet (its own route table, a default
route to the VPC's internet gateway, an S3 gateway endpoint on that route table) is created there. Why not the alternatives (docs/stacks.md):
a deploy-time wrapper would not run under a plain ``cdk deploy``, and an EC2 Fleet or Auto Scaling
group over every subnet returns no instance id to the stack, which the readiness gate, the
guardrails and discovery all need.

Catalog facts read: none (the caller passes the instance types and the preference).
"""
from __future__ import annotations

from typing import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from kit.subnets import CIDR_PREFIX
from stacks.custom_resource import HandlerFunction

# Which /24s each stack's subnets take: kit/subnets.py, the VPC's declared address plan.
_FUNCTION_ID = "AzChoiceFunction"


def _function(stack: cdk.Stack) -> HandlerFunction:
    """One chooser function per stack, whatever the number of subnets it places."""
    existing = getattr(stack, "_kit_az_choice", None)
    if existing is not None:
        return existing
    fn = HandlerFunction(
        stack, handler="az_choice", ids=("AzChoiceLogs", "AzChoiceRole", _FUNCTION_ID),
        role_description="Custom::AzChoice: read EC2 instance type offerings",
        description="Custom::AzChoice: the AZ offering the instance types (stacks/az_choice.py)",
        statements=[iam.PolicyStatement(
            sid="ReadOfferings", resources=["*"],
            actions=["ec2:DescribeInstanceTypeOfferings", "ec2:DescribeAvailabilityZones"])],
        any_resource_reason="ec2:DescribeInstanceTypeOfferings and ec2:DescribeAvailabilityZones support no "
                            "resource-level permissions (Service Authorization Reference, Amazon EC2)")
    stack._kit_az_choice = fn  # type: ignore[attr-defined]
    return fn


class OfferedSubnet(Construct):
    """Attributes: ``subnet`` (ec2.Subnet), ``availability_zone`` and ``offered`` (tokens)."""

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, instance_types: Sequence[str],
                 preferred_az: str | None, cidr_base: int, map_public_ip_on_launch: bool = False) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        fn = _function(stack)
        self.choice = fn.resource(
            self, "Choice", resource_type="Custom::AzChoice", service_timeout=cdk.Duration.minutes(2),
            properties={"InstanceTypes": list(instance_types), "PreferredAz": preferred_az or "",
                        "CidrPrefix": CIDR_PREFIX, "CidrBase": str(cidr_base)})
        self.availability_zone = self.choice.get_att_string("AvailabilityZone")
        self.offered = self.choice.get_att_string("Offered")
        self.subnet = ec2.Subnet(
            self, "Subnet", vpc_id=vpc.vpc_id, availability_zone=self.availability_zone,
            cidr_block=self.choice.get_att_string("CidrBlock"), map_public_ip_on_launch=map_public_ip_on_launch)
        self.subnet.add_default_internet_route(vpc.internet_gateway_id, vpc.internet_connectivity_established)
        # S3 (model packages, image-build assets, DLAMI packages) through a gateway endpoint of
        # this subnet's own route table: NetworkStack's endpoint covers only the VPC's own route
        # tables, and this one is made here. "Each subnet route table must have a route that sends
        # traffic destined for the service to the gateway endpoint" (Amazon VPC, PrivateLink guide,
        # Gateway endpoints); a VPC may hold several endpoints for one service, each on different
        # route tables (Amazon VPC User Guide, Gateway VPC endpoints); "no additional charge".
        self.s3_endpoint = ec2.GatewayVpcEndpoint(
            self, "S3", vpc=vpc, service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[self.subnet])])
