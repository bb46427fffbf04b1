"""BedrockStack: least-privilege IAM for the harness to invoke only the configured model.

Nothing here bills by the hour (Bedrock charges per token), so there is no guardrail to add.

Catalog facts read: none directly; the model id comes from the config (``<id>_model``, else the
catalog's default), the stack name and label from stacks/wiring.py.

What may be invoked (``bedrock:InvokeModel`` and ``bedrock:InvokeModelWithResponseStream``; the
Converse and ConverseStream APIs are authorized by those same two actions):
- a cross-region inference profile id (``us.amazon.nova-micro-v1:0``): the profile ARN in the
  configured region, plus the underlying foundation model in each region the profile may route
  to, *only when called through that profile* (condition ``bedrock:InferenceProfileArn``);
- a plain foundation-model id (``amazon.nova-micro-v1:0``): that model in the configured region.
A managed policy carries the statements; a role the account's principals may assume carries the
policy, for users who run the harness under a narrower identity.
"""
from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from kit.config import BackendConfig, KitConfig
from stacks.outputs import add_outputs

INVOKE_ACTIONS = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]

# Destination regions of the geographic cross-region inference profiles for Amazon Nova
# (Bedrock user guide, "Supported Regions and models for inference profiles"). A prefix not
# listed here falls back to any region, still pinned to the profile by the condition.
PROFILE_REGIONS: dict[str, tuple[str, ...]] = {
    "us": ("us-east-1", "us-east-2", "us-west-2"),
    "eu": ("eu-central-1", "eu-north-1", "eu-west-1", "eu-west-3"),
    "apac": ("ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2"),
}
_PROFILE = re.compile(r"^(us|eu|apac|us-gov|ca|jp|au|global)\.(.+)$")


def invoke_statements(model_id: str, region: str) -> list[iam.PolicyStatement]:
    """IAM statements allowing invocation of exactly ``model_id`` (profile or foundation model)."""
    part = cdk.Aws.PARTITION
    m = _PROFILE.match(model_id)
    if not m:
        return [iam.PolicyStatement(
            sid="InvokeFoundationModel", actions=INVOKE_ACTIONS,
            resources=[f"arn:{part}:bedrock:{region}::foundation-model/{model_id}"])]
    geo, base = m.groups()
    profile_arn = f"arn:{part}:bedrock:{region}:{cdk.Aws.ACCOUNT_ID}:inference-profile/{model_id}"
    regions = PROFILE_REGIONS.get(geo, ("*",))
    return [
        iam.PolicyStatement(sid="InvokeInferenceProfile", actions=INVOKE_ACTIONS, resources=[profile_arn]),
        iam.PolicyStatement(
            sid="InvokeModelThroughProfile", actions=INVOKE_ACTIONS,
            resources=[f"arn:{part}:bedrock:{r}::foundation-model/{base}" for r in regions],
            conditions={"StringEquals": {"bedrock:InferenceProfileArn": profile_arn}}),
    ]


class BedrockStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, backend: BackendConfig, config: KitConfig,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        statements = invoke_statements(backend.model_id, backend.region or config.region)
        self.policy = iam.ManagedPolicy(
            self, "InvokePolicy", statements=statements,
            description=f"Invoke only {backend.model_id} (InvokeModel, streaming, Converse)")
        self.role = iam.Role(
            self, "InvokeRole", assumed_by=iam.AccountRootPrincipal(), managed_policies=[self.policy],
            max_session_duration=cdk.Duration.hours(12),
            description=f"Harness role: invoke only {backend.model_id}")
        add_outputs(self, backend_id=backend.id, service="bedrock", model_id=backend.model_id,
                    instance_type="managed", ttl_expires_at=None, idle_stop_minutes=0,
                    ModelArn=statements[0].resources[0], InvokePolicyArn=self.policy.managed_policy_arn,
                    InvokeRoleArn=self.role.role_arn)
