"""Discovery of variant stacks (kit/variants.py): ``G6Stack-bf16`` -> endpoint ``g6@bf16``,
labelled with its model id and scheme, from describe_stacks (moto, and a recorded response shape
driven through a client that counts its calls) and from a cdk outputs file."""
from __future__ import annotations

import json

import boto3
from moto import mock_aws

from harness import discovery as disc
from kit import regions
from kit.contracts.outputs import COMMON_KEYS, KIND_KEYS, VARIANT_KEYS
from tests.harness.test_discovery import G6, _template

BF16 = {**G6, "ModelId": "google/gemma-4-E2B-it", "InstanceId": "i-0bf16bf16bf16bf16", "Variant": "bf16",
        "Scheme": "bf16"}
INT8 = {**G6, "ModelId": "package:int8", "InstanceId": "i-0int8int8int8int8", "Variant": "int8", "Scheme": "int8"}
CUSTOM = {**G6, "ModelId": "someone/gemma-4-E2B-it-fp8", "InstanceId": "i-0cccccccccccccccc", "Variant": "fp8",
          "Scheme": "unknown"}


def test_fixtures_carry_the_stacks_output_contract():
    assert set(BF16) == set(INT8) == {*COMMON_KEYS, *KIND_KEYS["ec2"], *VARIANT_KEYS}


def _check(d: disc.Discovery, names: list[str]) -> None:
    by = {e.name: e for e in d.endpoints}
    assert list(by) == names
    bf16 = by["g6@bf16"]
    assert (bf16.variant, bf16.scheme, bf16.model_id, bf16.instance_id, bf16.stack_name, bf16.protocol,
            bf16.service) == ("bf16", "bf16", "google/gemma-4-E2B-it", "i-0bf16bf16bf16bf16", "G6Stack-bf16",
                              "openai", "ec2")
    assert bf16.label.endswith("variant bf16")
    assert (by["g6@int8"].scheme, by["g6@int8"].model_id) == ("int8", "package:int8")
    if "g6" in by:  # the backend's own stack: no variant, the catalog model's scheme
        assert (by["g6"].variant, by["g6"].scheme) == (None, "w4a16")


def test_variant_stacks_on_moto(fake_aws):
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-east-1")
        for name, out in (("G6Stack", G6), ("G6Stack-int8", INT8), ("G6Stack-bf16", BF16),
                          ("NetworkStack", {"VpcId": "v"}), ("G6StackOther", {"VpcId": "v"})):
            cfn.create_stack(StackName=name, TemplateBody=_template(out))
        cfn.create_stack(StackName="G6Stack-gone", TemplateBody=_template({**G6, "Variant": "gone"}))
        cfn.delete_stack(StackName="G6Stack-gone")
        _check(disc.from_cloudformation(cfn, "us-east-1"), ["g6", "g6@bf16", "g6@int8"])
        # --backends g6: the backend and its variants; g6@bf16: that variant only
        _check(disc.from_cloudformation(cfn, "us-east-1", ["g6"]), ["g6", "g6@bf16", "g6@int8"])
        only = disc.from_cloudformation(cfn, "us-east-1", ["g6@bf16"])
        assert [e.name for e in only.endpoints] == ["g6@bf16"] and only.notes == []
        assert [e.name for e in disc.from_cloudformation(cfn, "us-east-1", ["inf2"]).endpoints] == []


class RecordedCfn:
    """describe_stacks / list_stacks answers in the shape boto3 returns them (CloudFormation API
    reference: DescribeStacks Stacks[].Outputs[] OutputKey/OutputValue; ListStacks StackSummaries,
    NextToken), two pages of summaries."""

    def __init__(self, stacks: dict[str, tuple[str, dict]]):
        self.stacks, self.calls = stacks, []

    def list_stacks(self, **kw):
        self.calls.append(("list_stacks", kw.get("NextToken")))
        assert "DELETE_COMPLETE" not in kw["StackStatusFilter"]
        names = sorted(self.stacks)
        half = len(names) // 2
        if kw.get("NextToken") is None:
            return {"StackSummaries": [{"StackName": n} for n in names[:half]], "NextToken": "page2"}
        return {"StackSummaries": [{"StackName": n} for n in names[half:]]}

    def describe_stacks(self, StackName):
        self.calls.append(("describe_stacks", StackName))
        if StackName not in self.stacks:
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}},
                              "DescribeStacks")
        status, outputs = self.stacks[StackName]
        return {"Stacks": [{"StackName": StackName, "StackStatus": status,
                            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]}]}

    def describe_stack_events(self, StackName):
        return {"StackEvents": []}


def test_variant_stacks_from_recorded_responses():
    cfn = RecordedCfn({"G6Stack-bf16": ("CREATE_COMPLETE", BF16), "G6Stack-int8": ("UPDATE_COMPLETE", INT8),
                       "G6Stack-fp8": ("CREATE_COMPLETE", CUSTOM), "G6Stack-new": ("CREATE_IN_PROGRESS", {}),
                       "NetworkStack": ("CREATE_COMPLETE", {})})
    d = disc.from_cloudformation(cfn, "us-east-1", ["g6"])
    _check(d, ["g6@bf16", "g6@fp8", "g6@int8"])
    fp8 = d.endpoints[1]
    assert (fp8.variant, fp8.scheme) == ("fp8", None)  # "unknown": not invented
    assert "g6: G6Stack not deployed" in d.notes
    assert "g6@new: G6Stack-new is CREATE_IN_PROGRESS, skipped" in d.notes
    assert ("list_stacks", "page2") in cfn.calls


def test_variants_in_an_outputs_file(tmp_path):
    f = tmp_path / "cdk-outputs.json"
    f.write_text(json.dumps({"G6Stack-bf16": BF16, "G6Stack-int8": INT8, "NetworkStack": {"VpcId": "v"}}))
    d = disc.from_outputs(disc.load_outputs_file(f), "us-east-1", ["g6"])
    _check(d, ["g6@bf16", "g6@int8"])


def test_a_variant_is_looked_for_in_its_backends_region(fake_aws):
    kit = regions.resolve(context={"region": "us-east-2", "g6_region": "us-east-1"})
    with mock_aws():
        boto3.client("cloudformation", region_name="us-east-1").create_stack(
            StackName="G6Stack-bf16", TemplateBody=_template(BF16))
        d = disc.from_regions(lambda r: boto3.client("cloudformation", region_name=r), kit, ["g6@bf16"])
    assert [(e.name, e.region) for e in d.endpoints] == [("g6@bf16", "us-east-1")]


def test_a_bad_variant_output_is_one_line():
    import pytest

    with pytest.raises(disc.DiscoveryError, match="output 'Variant' 'Bad Name' is not a variant name"):
        disc.endpoint_from_outputs("G6Stack-x", {**BF16, "Variant": "Bad Name"})
