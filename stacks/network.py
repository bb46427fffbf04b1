"""NetworkStack: the VPC every EC2 backend shares, with no NAT gateway and no inbound path.

Catalog facts read: none (backend-independent).

Design (cost and exposure):
- No NAT gateway (~$33/month each plus data). Instances sit in *public* subnets with a public
  IPv4 address so they can download engines and weights (PyPI, Hugging Face) directly; their
  security group admits nothing except SSH from the Instance Connect Endpoint's group, so the
  public address receives no traffic (see inference_instance.py).
- An EC2 Instance Connect Endpoint (free) in an isolated subnet is the only way in: the harness
  opens a websocket tunnel to port 22 and forwards to the model server on 127.0.0.1.
- An S3 gateway endpoint (free) keeps S3 traffic (DLAMI packages, image-pipeline artefacts) on
  the AWS network.
- VPC flow logs to CloudWatch Logs (one-week retention): a handful of records per hour for
  these few instances, and the audit trail a reviewer expects.
"""
from __future__ import annotations

from typing import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

# Without ``azs`` in the context the VPC spans the region's first two AZs, resolved at deploy
# time (no account lookup at synth). GPU and Neuron types are offered in few AZs (trn1.2xlarge,
# g5g.2xlarge): ``-c azs=us-east-1a,us-east-1d -c trn1_az=us-east-1d`` puts a backend where its
# type is offered (the harness preflight lists offerings per AZ).
DEFAULT_AZ_COUNT = 2


class NetworkStack(cdk.Stack):
    """Attributes passed to backend stacks: ``vpc`` and ``eice_security_group``."""

    def __init__(self, scope: Construct, construct_id: str, *, azs: Sequence[str] = (), **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        where = {"availability_zones": list(azs)} if azs else {"max_azs": DEFAULT_AZ_COUNT}
        self.vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr("10.42.0.0/16"),
            **where,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24,
                                        map_public_ip_on_launch=False),
                ec2.SubnetConfiguration(name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                                        cidr_mask=24),
            ],
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
            # The default security group is attached to nothing here; restricting it would add a
            # custom-resource Lambda to every deployment for no change in exposure.
            restrict_default_security_group=False,
        )
        flow_logs = logs.LogGroup(self, "FlowLogs", retention=logs.RetentionDays.ONE_WEEK,
                                  removal_policy=cdk.RemovalPolicy.DESTROY)
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                              traffic_type=ec2.FlowLogTrafficType.ALL)

        # The endpoint's group only talks SSH into the VPC; instance groups admit 22 from it.
        self.eice_security_group = ec2.SecurityGroup(
            self, "EiceSecurityGroup", vpc=self.vpc, allow_all_outbound=False,
            description="EC2 Instance Connect Endpoint: SSH out to kit instances only",
        )
        self.eice_security_group.add_egress_rule(ec2.Peer.ipv4(self.vpc.vpc_cidr_block), ec2.Port.tcp(22),
                                                 "SSH to inference instances in this VPC")
        self.instance_connect_endpoint = ec2.CfnInstanceConnectEndpoint(
            self, "InstanceConnectEndpoint",
            subnet_id=self.vpc.isolated_subnets[0].subnet_id,
            security_group_ids=[self.eice_security_group.security_group_id],
            preserve_client_ip=False,
        )

        cdk.CfnOutput(self, "VpcId", value=self.vpc.vpc_id)
        cdk.CfnOutput(self, "InstanceConnectEndpointId", value=self.instance_connect_endpoint.attr_id)
