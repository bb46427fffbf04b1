"""One region resolution (kit/regions.py) for deploy, discovery, preflight, cost and lint."""
from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from kit import regions
from harness.discovery import from_regions
from kit.config import ConfigError, parse
from tests.harness.test_discovery import G6, _template

SHELL = {"AWS_REGION": "us-east-2", "AWS_DEFAULT_REGION": "us-east-2"}


def test_order_explicit_then_context_then_default_and_never_the_shell(tmp_path):
    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"context": {"region": "eu-west-1", "g5g_region": "us-east-1"}}))
    assert regions.resolve("ap-south-1", cdk_json=cdk).region == "ap-south-1"
    kit = regions.resolve(cdk_json=cdk)
    assert (kit.region, kit.source) == ("eu-west-1", "context region")
    assert regions.resolve(cdk_json=tmp_path / "missing.json").region == regions.DEFAULT_REGION
    # Per backend: g5g where its type is offered, the rest in the kit's region.
    assert (kit.of("g5g"), kit.of("g6"), kit.regions) == ("us-east-1", "eu-west-1", ("eu-west-1", "us-east-1"))
    assert kit.backends_in("us-east-1") == ("g5g",)
    assert kit.describe() == "eu-west-1 (context region); g5g in us-east-1 (g5g_region)"


def test_a_shell_region_the_kit_does_not_use_is_named_in_one_line(tmp_path):
    kit = regions.resolve(context={"region": "us-east-1"})
    note = kit.shell_note(SHELL)
    assert note and "\n" not in note and "AWS_REGION=us-east-2" in note and "us-east-1" in note
    assert "-c region=us-east-2" in note and "--region us-east-2" in note
    assert kit.shell_note({"AWS_REGION": "us-east-1"}) is None and kit.shell_note({}) is None


@pytest.mark.parametrize("context,key", [({"region": "us-east"}, "region"), ({"g5g_region": "east"}, "g5g_region")])
def test_bad_region_is_one_line_naming_the_key(context, key):
    with pytest.raises(regions.RegionError, match=f"^{key}="):
        regions.resolve(context=context)
    with pytest.raises(ConfigError, match=f"^{key}="):  # cdk synth says the same through kit.config
        parse(context)


def test_the_cdk_app_and_the_harness_resolve_the_same_regions(monkeypatch):
    """kit.config (what cdk deploy uses) reads the same resolution, whatever the shell says."""
    for k, v in SHELL.items():
        monkeypatch.setenv(k, v)
    ctx = json.loads((regions.CDK_JSON).read_text())["context"]
    ctx = {k: v for k, v in ctx.items() if "@" not in k and ":" not in k and "-" not in k}
    cfg = parse({**ctx, "g5g_region": "us-west-2"})
    kit = regions.resolve(context={**ctx, "g5g_region": "us-west-2"})
    assert cfg.region == kit.region == regions.resolve().region
    assert {b.id: b.region for b in cfg.backends} == {b.id: kit.of(b.id) for b in cfg.backends}
    assert cfg.regions == kit.regions


def test_discovery_looks_for_each_backend_in_its_own_region(fake_aws):
    kit = regions.resolve(context={"region": "us-east-2", "g6_region": "us-east-1"})
    with mock_aws():
        boto3.client("cloudformation", region_name="us-east-1").create_stack(
            StackName="G6Stack", TemplateBody=_template(G6))
        # The same stack name in the kit's region belongs to nothing the config deploys there.
        boto3.client("cloudformation", region_name="us-east-2").create_stack(
            StackName="G6Stack", TemplateBody=_template({**G6, "Region": "us-east-2", "InstanceId": "i-0wrong"}))
        d = from_regions(lambda r: boto3.client("cloudformation", region_name=r), kit, ["g6", "inf2"])
    (ep,) = d.endpoints
    assert (ep.name, ep.region, ep.instance_id) == ("g6", "us-east-1", "i-0123456789abcdef0")
    assert d.notes == ["inf2: Inf2Stack not deployed in us-east-2"]


def test_lint_uses_each_templates_own_region(tmp_path):
    manifest = {"artifacts": {
        "G5gStack": {"type": "aws:cloudformation:stack", "environment": "aws://unknown-account/us-east-1",
                     "properties": {"templateFile": "G5gStack.template.json"}},
        "Inf2Stack": {"type": "aws:cloudformation:stack", "environment": "aws://unknown-account/us-east-2",
                      "properties": {"templateFile": "Inf2Stack.template.json"}},
        "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cmds = regions.lint_commands(tmp_path, "cfn-lint")
    assert cmds == [["cfn-lint", str(tmp_path / "G5gStack.template.json"), "--regions", "us-east-1"],
                    ["cfn-lint", str(tmp_path / "Inf2Stack.template.json"), "--regions", "us-east-2"]]
