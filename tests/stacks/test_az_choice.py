"""No instance or build host pinned to the region's first AZ. The AZ choice
(stacks/lambdas/az_choice/index.py) follows EC2's instance type offerings per AZ, here moto's
recorded DescribeInstanceTypeOfferings data (moto 5.2.5, ec2/resources/instance_type_offerings:
e.g. trn1.2xlarge only in us-east-1c and us-east-1f, g5g.2xlarge in no us-east-2 AZ)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from moto import mock_aws

from stacks.lambdas.az_choice import index
from tests.stacks.conftest import EC2_STACKS


@pytest.fixture
def aws(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield


def event(types, preferred="", request="Create", physical=None, base="64"):
    e = {"RequestType": request, "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/Trn1Stack/x",
         "RequestId": "r-1", "LogicalResourceId": "ServerPlacementChoice", "ResponseURL": "http://unused",
         "ResourceProperties": {"InstanceTypes": list(types), "PreferredAz": preferred,
                                "CidrPrefix": "10.42", "CidrBase": base}}
    if physical:
        e["PhysicalResourceId"] = physical
    return e


def run(region, ev):
    sent = []
    index.handler(ev, None, ec2=boto3.client("ec2", region_name=region),
                  send=lambda e, status, pid, data, reason="": sent.append((status, pid, data, reason)))
    (answer,) = sent
    return answer


def test_trn1_lands_where_it_is_offered_not_in_the_first_az(aws):
    status, pid, data, _ = run("us-east-1", event(["trn1.2xlarge"], base="88"))
    assert status == "SUCCESS"
    # moto's offerings: trn1.2xlarge in us-east-1c and us-east-1f only; us-east-1a would fail.
    assert data["Offered"] == "us-east-1c,us-east-1f"
    assert pid == data["AvailabilityZone"] == "us-east-1c"
    assert data["CidrBlock"] == "10.42.90.0/24"  # base 88 + letter c (2)


def test_every_kit_type_gets_an_az_that_offers_it(aws):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    for types in (["g6.xlarge"], ["g5g.2xlarge"], ["inf2.xlarge"], ["trn1.2xlarge"],
                  ["c7g.8xlarge", "c7g.16xlarge"], ["c7g.8xlarge", "c7g.16xlarge", "g5g.2xlarge"]):
        status, _, data, reason = run("us-east-1", event(types))
        assert status == "SUCCESS", reason
        offered = index.offerings(ec2, types)
        assert all(data["AvailabilityZone"] in offered[t] for t in types)


def test_a_type_the_region_lacks_fails_in_one_line_saying_what_to_do(aws):
    status, _, data, reason = run("us-east-2", event(["g5g.2xlarge"]))
    assert status == "FAILED" and data == {}
    assert reason.startswith("g5g.2xlarge is offered in no Availability Zone of us-east-2")
    assert "-c <id>_region=" in reason and "\n" not in reason


def test_the_users_az_is_honoured_when_offered_and_refused_with_the_alternatives_when_not(aws):
    status, _, data, _ = run("us-east-1", event(["trn1.2xlarge"], preferred="us-east-1f"))
    assert (status, data["AvailabilityZone"]) == ("SUCCESS", "us-east-1f")
    status, _, _, reason = run("us-east-1", event(["trn1.2xlarge"], preferred="us-east-1a"))
    assert status == "FAILED"
    assert reason == ("us-east-1a does not offer trn1.2xlarge in this account; AZs that do: us-east-1c, "
                      "us-east-1f (set -c <id>_az to one of them, or drop it)")


def test_an_update_keeps_the_az_it_chose_while_it_still_offers_the_types(aws):
    status, pid, data, _ = run("us-east-1", event(["inf2.xlarge"], request="Update", physical="us-east-1f"))
    assert (status, pid, data["AvailabilityZone"]) == ("SUCCESS", "us-east-1f", "us-east-1f")
    # trn1 -> g5g.2xlarge: us-east-1f does not offer it, so the subnet (and instance) move.
    status, pid, data, _ = run("us-east-1", event(["g5g.2xlarge"], request="Update", physical="us-east-1f"))
    assert (status, pid) == ("SUCCESS", "us-east-1a") and data["CidrBlock"] == "10.42.64.0/24"


def test_delete_does_nothing_and_succeeds(aws):
    status, pid, data, _ = run("us-east-1", event(["trn1.2xlarge"], request="Delete", physical="us-east-1c"))
    assert (status, pid, data) == ("SUCCESS", "us-east-1c", {})


def test_the_response_is_the_documented_put_with_an_empty_content_type():
    got = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_PUT(self):
            got["ctype"] = self.headers.get("Content-Type")
            got["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ev = {**event(["g6.xlarge"]), "ResponseURL": f"http://127.0.0.1:{server.server_address[1]}/resp?X-Amz-Signature=a"}
        index.respond(ev, "FAILED", "pending", {}, "g6.xlarge is offered in no Availability Zone of x")
    finally:
        server.shutdown()
        server.server_close()
    assert got["ctype"] in ("", None)
    assert got["body"] == {"Status": "FAILED", "Reason": "g6.xlarge is offered in no Availability Zone of x",
                           "PhysicalResourceId": "pending", "StackId": ev["StackId"], "RequestId": "r-1",
                           "LogicalResourceId": "ServerPlacementChoice", "Data": {}}


# ----------------------------------------------------------------------------- the templates
def _choice_of_subnet(template: dict, subnet_ref: dict) -> dict:
    subnet = template["Resources"][subnet_ref["Ref"]]["Properties"]
    lid = subnet["AvailabilityZone"]["Fn::GetAtt"][0]
    assert subnet["CidrBlock"] == {"Fn::GetAtt": [lid, "CidrBlock"]}
    choice = template["Resources"][lid]
    assert choice["Type"] == "Custom::AzChoice"
    return choice["Properties"]


@pytest.mark.parametrize("backend,stack", sorted(EC2_STACKS.items()))
def test_each_instance_sits_in_a_subnet_placed_by_its_own_types_offerings(kit, backend, stack):
    t = kit.templates[stack]
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    (nic,) = instance["Properties"]["NetworkInterfaces"]
    props = _choice_of_subnet(t, nic["SubnetId"])
    assert props["InstanceTypes"] == [instance["Properties"]["InstanceType"]] and props["PreferredAz"] == ""
    assert "Fn::GetAZs" not in json.dumps(t)  # nothing positional


def test_no_stack_but_the_network_uses_a_positional_az(kit):
    for name, t in kit.templates.items():
        if not name.startswith("NetworkStack"):
            assert "Fn::GetAZs" not in json.dumps(t), name


def test_image_build_hosts_are_placed_by_every_build_and_test_type(kit):
    for name in ("VllmCudaImageStack", "VllmSm75ImageStack", "NeuronImageStack"):
        t = kit.templates[name]
        infra = kit.resources(name, "AWS::ImageBuilder::InfrastructureConfiguration").values()
        types = {ty for i in infra for ty in i["Properties"]["InstanceTypes"]}
        subnets = {json.dumps(i["Properties"]["SubnetId"]) for i in infra}
        (subnet,) = subnets
        props = _choice_of_subnet(t, json.loads(subnet))
        assert set(props["InstanceTypes"]) == types


def test_a_preferred_az_reaches_the_choice(tmp_path):
    from tests.stacks.conftest import synth

    s = synth(tmp_path, backends="g6,trn1", trn1_az="us-east-1f", image_az="us-east-1b")
    _, trn1 = s.one("Trn1Stack", "AWS::EC2::Instance")
    props = _choice_of_subnet(s.templates["Trn1Stack"], trn1["Properties"]["NetworkInterfaces"][0]["SubnetId"])
    assert props["PreferredAz"] == "us-east-1f"
    (choice,) = s.resources("NeuronImageStack", "Custom::AzChoice").values()
    assert choice["Properties"]["PreferredAz"] == "us-east-1b"


def test_the_chooser_may_only_read_offerings(kit):
    for stack in EC2_STACKS.values():
        roles = kit.resources(stack, "AWS::IAM::Role")
        (lid,) = [k for k, v in roles.items() if "lambda.amazonaws.com" in json.dumps(v) and k.startswith("AzChoice")]
        assert "ManagedPolicyArns" not in roles[lid]["Properties"]
        actions = {a for p in kit.resources(stack, "AWS::IAM::Policy").values()
                   if {"Ref": lid} in p["Properties"]["Roles"]
                   for s in p["Properties"]["PolicyDocument"]["Statement"]
                   for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        assert actions == {"ec2:DescribeInstanceTypeOfferings", "ec2:DescribeAvailabilityZones",
                           "logs:CreateLogStream", "logs:PutLogEvents"}


def _route_table_of(template, subnet_ref):
    (assoc,) = [r for r in template["Resources"].values()
                if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation" and r["Properties"]["SubnetId"] == subnet_ref]
    return assoc["Properties"]["RouteTableId"]


@pytest.mark.parametrize("stack", sorted(EC2_STACKS.values()) + ["VllmCudaImageStack", "VllmSm75ImageStack",
                                                                  "NeuronImageStack"])
def test_the_placed_subnet_reaches_s3_through_a_gateway_endpoint(kit, stack):
    """Review R4: S3 traffic of a placed subnet (package sync, S3Download of build assets) goes
    through an S3 gateway endpoint on that subnet's route table, as network.py and
    engine-vllm-gpu.sh say. "Each subnet route table must have a route that sends traffic destined
    for the service to the gateway endpoint" (Amazon VPC PrivateLink guide, Gateway endpoints)."""
    t = kit.templates[stack]
    (subnet_id,) = kit.resources(stack, "AWS::EC2::Subnet")
    table = _route_table_of(t, {"Ref": subnet_id})
    endpoints = [r["Properties"] for r in kit.resources(stack, "AWS::EC2::VPCEndpoint").values()]
    gateways = [e for e in endpoints if e.get("VpcEndpointType") == "Gateway"
                and "s3" in json.dumps(e["ServiceName"])]
    assert [g["RouteTableIds"] for g in gateways] == [[table]]
