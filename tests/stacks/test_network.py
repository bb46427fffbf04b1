"""NetworkStack: no NAT, Instance Connect Endpoint with its own group, S3 gateway endpoint, flow logs."""
from __future__ import annotations



def test_no_nat_gateway_and_no_public_ip_by_default(kit):
    t = kit.template("NetworkStack")
    t.resource_count_is("AWS::EC2::NatGateway", 0)
    t.resource_count_is("AWS::EC2::EIP", 0)
    t.resource_count_is("AWS::EC2::Subnet", 4)
    t.all_resources_properties("AWS::EC2::Subnet", {"MapPublicIpOnLaunch": False})


def test_two_azs_resolved_at_deploy_time_by_default(kit):
    subnets = kit.resources("NetworkStack", "AWS::EC2::Subnet").values()
    azs = [s["Properties"]["AvailabilityZone"] for s in subnets]
    assert len(azs) == 4  # public + isolated in each of two AZs
    assert all("Fn::GetAZs" in str(az) for az in azs)


def test_instance_connect_endpoint_in_an_isolated_subnet_with_ssh_only_egress(kit):
    _, eice = kit.one("NetworkStack", "AWS::EC2::InstanceConnectEndpoint")
    p = eice["Properties"]
    assert p["PreserveClientIp"] is False
    subnet_id = p["SubnetId"]["Ref"]
    assert "isolated" in subnet_id
    (sg_ref,) = p["SecurityGroupIds"]
    sg = kit.templates["NetworkStack"]["Resources"][sg_ref["Fn::GetAtt"][0]]["Properties"]
    assert "SecurityGroupIngress" not in sg
    (egress,) = sg["SecurityGroupEgress"]
    assert (egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == ("tcp", 22, 22)
    assert egress["CidrIp"] == {"Fn::GetAtt": ["Vpc8378EB38", "CidrBlock"]}


def test_s3_gateway_endpoint_and_flow_logs(kit):
    t = kit.template("NetworkStack")
    t.resource_count_is("AWS::EC2::VPCEndpoint", 1)  # a gateway endpoint: no hourly charge
    t.has_resource_properties("AWS::EC2::VPCEndpoint", {
        "VpcEndpointType": "Gateway",
        "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]}})
    t.resource_count_is("AWS::EC2::FlowLog", 1)
    t.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL"})
    t.resource_count_is("AWS::Logs::LogGroup", 1)
    t.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7})


def test_network_exports_what_backends_import(kit):
    exports = {v["Export"]["Name"] for v in kit.templates["NetworkStack"]["Outputs"].values() if "Export" in v}
    imports = {str(i) for name in ("G6Stack", "Inf2Stack")
               for i in _imports(kit.templates[name])}
    assert imports and imports <= exports


def _imports(node):
    if isinstance(node, dict):
        if "Fn::ImportValue" in node:
            yield node["Fn::ImportValue"]
        for v in node.values():
            yield from _imports(v)
    elif isinstance(node, list):
        for v in node:
            yield from _imports(v)
