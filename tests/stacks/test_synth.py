"""The whole kit synthesizes: every stack, cdk-nag clean, cfn-lint clean, nothing open to the world,
the same output keys on every backend stack."""
from __future__ import annotations

import json
import subprocess

import pytest

from kit.catalog import BACKENDS
from kit.contracts.outputs import keys_for
from tests.conftest import require_binary
from tests.stacks.conftest import ROOT, synth

ALL_STACKS = {"NetworkStack", *(b.stack_name for b in BACKENDS.values())}
WORLD = {"0.0.0.0/0", "::/0"}


def test_every_stack_is_synthesized(kit):
    # Image-pipeline stacks (stacks/images.py) come on top; tested in test_images*.py.
    assert ALL_STACKS <= set(kit.templates)


def test_stacks_are_region_bound_and_account_free(kit):
    for name, stack in kit.stacks.items():
        assert stack.region == "us-east-1", name
        assert stack.account.startswith("${Token"), f"{name} has a concrete account: no lookups allowed"


def test_backend_stacks_on_the_vpc_depend_on_network(kit):
    for name, stack in kit.stacks.items():
        deps = {d.stack_name for d in stack.dependencies}
        backend = next((b for b in BACKENDS.values() if b.stack_name == name), None)
        if backend is None:
            continue  # NetworkStack, image pipelines
        if backend.service == "ec2":
            assert deps == {"NetworkStack"}, name
        else:
            assert deps == set(), f"{name} should deploy without the network"


def test_cdk_nag_ran_and_found_nothing_unacknowledged(kit):
    report = json.loads((kit.outdir / "validation-report.json").read_text())
    assert report["pluginReports"], "cdk-nag did not run"
    for plugin in report["pluginReports"]:
        assert plugin["conclusion"] == "success", json.dumps(plugin["violations"])[:2000]
        assert plugin["violations"] == []
        for ack in plugin.get("suppressedViolations", []):  # every acknowledgment says why
            assert len(ack["reason"]) > 40, ack["ruleName"]


def test_cdk_nag_fails_synth_on_an_unacknowledged_finding(tmp_path):
    """The nag check above can fail: a world-open SSH rule makes synthesis raise."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from stacks import nag

    app = cdk.App(outdir=str(tmp_path), builtin_cloud_formation_validation=False)
    stack = cdk.Stack(app, "Bad", env=cdk.Environment(region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", nat_gateways=0, restrict_default_security_group=False)
    ec2.SecurityGroup(stack, "Open", vpc=vpc).add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22))
    nag.enable(app)
    with pytest.raises(Exception, match="AwsSolutions"):
        app.synth()


def test_cfn_lint_has_no_errors_on_any_template(kit):
    # One cfn-lint process for every template: a few seconds, where the library API costs
    # a schema load per template.
    cfn_lint = require_binary(str(ROOT / ".venv/bin/cfn-lint"))
    paths = [str(kit.outdir / f"{name}.template.json") for name in sorted(kit.templates)]
    r = subprocess.run([cfn_lint, "--format", "parseable", "--regions", "us-east-1", *paths],
                       capture_output=True, text=True)
    errors = [line for line in r.stdout.splitlines() if ":E" in line or line.split(":")[-2:-1] == ["error"]]
    assert not r.returncode & 2 and not errors, r.stdout + r.stderr  # bit 2: errors (4 warnings, 8 info)


def _ingress_cidrs(template: dict):
    for logical_id, r in template["Resources"].items():
        rules = []
        if r["Type"] == "AWS::EC2::SecurityGroup":
            rules = r["Properties"].get("SecurityGroupIngress", [])
        elif r["Type"] == "AWS::EC2::SecurityGroupIngress":
            rules = [r["Properties"]]
        for rule in rules:
            for key in ("CidrIp", "CidrIpv6"):
                if key in rule:
                    yield logical_id, rule[key]


def test_no_security_group_admits_the_world(kit):
    for name, template in kit.templates.items():
        for logical_id, cidr in _ingress_cidrs(template):
            assert cidr not in WORLD, f"{name}/{logical_id} admits {cidr}"


def test_world_check_catches_an_open_rule():
    bad = {"Resources": {"Sg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "SecurityGroupIngress": [{"CidrIpv6": "::/0", "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22}]}}}}
    assert list(_ingress_cidrs(bad)) == [("Sg", "::/0")]


def test_every_backend_stack_has_the_same_output_keys(kit):
    for backend in BACKENDS.values():
        outputs = kit.templates[backend.stack_name]["Outputs"]
        keys = {k for k in outputs if not k.startswith("Export")}
        assert keys == set(keys_for(backend.service)), backend.id  # the contract kit/contracts/outputs.py
        assert outputs["BackendId"]["Value"] == backend.id
        assert outputs["Service"]["Value"] == backend.service
        assert outputs["Region"]["Value"] == "us-east-1"


def test_ttl_output_follows_the_clock(kit):
    # FIXED_NOW 12:00:30 + 8 h, rounded up to the minute.
    for name in ("G6Stack", "SageMakerStack", "Trn1Stack"):
        assert kit.templates[name]["Outputs"]["TtlExpiresAt"]["Value"] == "2026-03-01T20:01:00Z"
    assert kit.templates["BedrockStack"]["Outputs"]["TtlExpiresAt"]["Value"] == "disabled"


def test_selecting_backends_synthesizes_only_those(tmp_path):
    s = synth(tmp_path, backends="bedrock,sagemaker")
    assert set(s.templates) == {"BedrockStack", "SageMakerStack"}  # no VPC for the managed services


def test_project_tag_and_user_tags_reach_resources(tmp_path):
    s = synth(tmp_path, backends="g6", tags={"owner": "workshop-7"})
    _, instance = s.one("G6Stack", "AWS::EC2::Instance")
    tags = {t["Key"]: t["Value"] for t in instance["Properties"]["Tags"]}
    assert tags["project"] == "aws-inference-kit" and tags["owner"] == "workshop-7"
