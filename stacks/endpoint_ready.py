"""A bounded wait for SageMaker endpoints: ``cdk deploy`` fails with a clear reason, saying the
endpoint is still billing, instead of waiting silently for hours.

What CloudFormation offers for AWS::SageMaker::Endpoint: no CreationPolicy (only
AutoScalingGroup, EC2 Instance, WaitCondition and AppStream Fleet take one: CreationPolicy
attribute, User Guide) and a handler timeout of 160 minutes (the resource's registry schema,
``handlers.create.timeoutInMinutes``, as cfn-lint ships it). A stack-level timeout exists only
for CreateStack (``TimeoutInMinutes``), not for the change sets ``cdk deploy`` executes. So a
``Custom::EndpointReady`` per endpoint (handler: stacks/lambdas/endpoint_ready/index.py) runs
beside it and fails the stack after ``sagemaker_ready_minutes``; its ``ServiceTimeout`` (at most
3600 s, AWS::CloudFormation::CustomResource) is the backstop should the function never answer.
An endpoint still ``Creating`` at the bound has its retained TTL schedule started at once, so its
deletion is under way when the stack fails (the handler's module docstring).

Catalog facts read: none.
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.custom_resource import HandlerFunction
from stacks.guardrails import EndpointTtl

SERVICE_TIMEOUT_MAX_S = 3600  # AWS::CloudFormation::CustomResource ServiceTimeout: 1-3600
MARGIN_S = 300  # the function answers by itself; the service timeout only if it never does
MAX_READY_MINUTES = (SERVICE_TIMEOUT_MAX_S - MARGIN_S) // 60  # 55


class EndpointReady(Construct):
    """One waiter function for the stack; ``wait(endpoint_name, bound_minutes)`` adds one watch."""

    def __init__(self, scope: Construct, construct_id: str, *, endpoint_names: list[str]) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        # A fixed name, so its role can allow invoking itself without a reference cycle.
        self.function_name = f"{stack.stack_name}-endpoint-ready"[:64]
        self.handler = HandlerFunction(
            self, handler="endpoint_ready", ids=("Logs", "Role", "Function"),
            role_description="Custom::EndpointReady: watch this stack's SageMaker endpoints",
            description="Custom::EndpointReady: bounded wait for InService (stacks/endpoint_ready.py)",
            statements=[
                iam.PolicyStatement(
                    sid="DescribeOwnEndpoints", actions=["sagemaker:DescribeEndpoint"],
                    resources=[stack.format_arn(service="sagemaker", resource="endpoint", resource_name=n.lower())
                               for n in endpoint_names]),
                iam.PolicyStatement(
                    sid="HandOverToItself", actions=["lambda:InvokeFunction"],
                    resources=[stack.format_arn(service="lambda", resource="function",
                                                resource_name=self.function_name,
                                                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)])],
            timeout=cdk.Duration.minutes(15), function_name=self.function_name)
        self.role, self.function = self.handler.role, self.handler.function

    def release(self, scope: Construct, sid: str, endpoint_name: str, ttl: EndpointTtl) -> cdk.CustomResource:
        """Custom::EndpointTtlRelease: the endpoint's TTL guard is kept when the stack is deleted
        (stacks/guardrails.py); this resource, deleted after the endpoint (the caller makes the
        endpoint depend on it), deletes the schedule and its role once the endpoint is really gone
        (the handler's ``release``)."""
        made = self.handler.resource(
            scope, f"TtlRelease{sid}", resource_type="Custom::EndpointTtlRelease",
            service_timeout=cdk.Duration.minutes(5),
            properties={"EndpointName": endpoint_name, "ScheduleName": ttl.schedule.ref,
                        "RoleName": ttl.role.role_name})
        self.role.add_to_policy(iam.PolicyStatement(
            sid=f"ReleaseTtlSchedule{sid}", actions=["scheduler:DeleteSchedule"],
            resources=[ttl.schedule.attr_arn]))
        self.role.add_to_policy(iam.PolicyStatement(
            sid=f"ReleaseTtlRole{sid}",
            actions=["iam:ListRolePolicies", "iam:DeleteRolePolicy", "iam:DeleteRole"],
            resources=[ttl.role.role_arn]))
        return made

    def wait(self, construct_id: str, endpoint_name: str, bound_minutes: int,
             ttl: EndpointTtl | None = None) -> cdk.CustomResource:
        """With ``ttl`` (the endpoint's guard), a Creating endpoint at the bound gets its TTL schedule
        started at once (the handler's ``pull_forward``): the role may read and update that one
        schedule and pass its role to Scheduler, which UpdateSchedule needs (the schedule's
        Target.RoleArn)."""
        if not 1 <= bound_minutes <= MAX_READY_MINUTES:
            raise ValueError(f"bound_minutes={bound_minutes}; 1 to {MAX_READY_MINUTES}")
        props = {"EndpointName": endpoint_name, "BoundMinutes": str(bound_minutes)}
        if ttl is not None:
            props["ScheduleName"] = ttl.schedule.ref
            self.role.add_to_policy(iam.PolicyStatement(
                sid=f"StartTtlEarly{construct_id}", actions=["scheduler:GetSchedule", "scheduler:UpdateSchedule"],
                resources=[ttl.schedule.attr_arn]))
            self.role.add_to_policy(iam.PolicyStatement(
                sid=f"PassTtlRole{construct_id}", actions=["iam:PassRole"], resources=[ttl.role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}))
        return self.handler.resource(
            self, construct_id, resource_type="Custom::EndpointReady",
            service_timeout=cdk.Duration.seconds(bound_minutes * 60 + MARGIN_S), properties=props)
