"""BedrockStack: invoke only the configured model / inference profile."""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Match

from stacks.bedrock import INVOKE_ACTIONS, invoke_statements


def joined(value) -> str:
    """A Fn::Join ARN as text, each reference shown as {}."""
    return "".join(p if isinstance(p, str) else "{}" for p in value["Fn::Join"][1])


def test_policy_allows_only_the_profile_and_its_models(kit):
    _, policy = kit.one("BedrockStack", "AWS::IAM::ManagedPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert len(statements) == 2
    for s in statements:
        assert s["Effect"] == "Allow" and sorted(s["Action"]) == sorted(INVOKE_ACTIONS)
    profile, models = statements
    assert joined(profile["Resource"]) == "arn:{}:bedrock:us-east-1:{}:inference-profile/us.amazon.nova-micro-v1:0"
    arns = [joined(r) for r in models["Resource"]]
    assert arns == [f"arn:{{}}:bedrock:{r}::foundation-model/amazon.nova-micro-v1:0"
                    for r in ("us-east-1", "us-east-2", "us-west-2")]
    # Foundation models only through this profile: no direct on-demand use, no other model.
    assert models["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"] == profile["Resource"]


def test_role_carries_only_that_policy(kit):
    t = kit.template("BedrockStack")
    t.resource_count_is("AWS::IAM::Role", 1)
    (policy_id,) = t.find_resources("AWS::IAM::ManagedPolicy")
    # The stack's own policy, no AWS managed one, no inline policy.
    t.has_resource_properties("AWS::IAM::Role", {"ManagedPolicyArns": [{"Ref": policy_id}], "Policies": Match.absent()})


def test_plain_foundation_model_id_is_one_arn_in_the_region():
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="eu-west-1"))
    (s,) = invoke_statements("amazon.nova-micro-v1:0", "eu-west-1")
    assert stack.resolve(s.to_statement_json())["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:eu-west-1::foundation-model/amazon.nova-micro-v1:0"]]}


def test_unknown_geography_keeps_the_profile_condition():
    profile, models = invoke_statements("global.anthropic.claude-x-v1:0", "us-east-1")
    assert any(":bedrock:*::foundation-model/anthropic.claude-x-v1:0" in str(r) for r in models.resources)
    assert "bedrock:InferenceProfileArn" in str(models.to_statement_json())


def test_bedrock_outputs(kit):
    t = kit.template("BedrockStack")
    t.has_output("ModelId", {"Value": "us.amazon.nova-micro-v1:0"})
    t.has_output("InstanceType", {"Value": "managed"})
    t.has_output("IdleStopMinutes", {"Value": "0"})
    t.has_output("ModelArn", {"Value": {"Fn::Join": ["", Match.array_with(
        [Match.string_like_regexp("inference-profile/us.amazon.nova-micro-v1:0")])]}})
