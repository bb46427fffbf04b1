"""The kit's Lambda-backed custom resources, built one way: ``HandlerFunction`` makes a handler's
log group, role (with the statements the caller names plus writing to its own log group), the
cdk-nag acknowledgments those need, and the function; ``resource()`` adds a custom resource served
by it that waits for the role's policy.

Why not aws-cdk-lib's ``custom_resources.Provider``: it adds a framework function (and, with an
``is_complete_handler``, a Step Functions state machine) in front of every handler, more billed
parts and more roles to acknowledge, for the asynchronous waiting only Custom::EndpointReady does,
which it already does by re-invoking itself. ``AwsCustomResource`` makes one SDK call per event
and cannot hold the logic these need (choose an AZ, check every image, bound a wait).

Not a Construct subclass on purpose: its parts are created in the caller's scope under the ids
the caller gives, so the logical ids the stacks had before it existed (``AzChoiceRole...``,
``<Key>ParentLookup...``, ``ImagesReady`` / ``Ready``'s ``Logs``, ``Role``, ``Function``) stay as
they were and a deployed stack replaces nothing (tests/stacks/test_custom_resources.py).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks import nag
from stacks.lambda_code import handler_code, handler_name

RUNTIME = lambda_.Runtime.PYTHON_3_14


class HandlerFunction:
    """Attributes: ``log_group``, ``role``, ``function``.

    ``statements`` are added before the own-logs one; ``any_resource_reason`` is the cdk-nag
    reason for statements on ``"*"`` (required when one has it: an API without resource-level
    permissions, which the reason must name)."""

    def __init__(self, scope: Construct, *, handler: str, ids: tuple[str, str, str], role_description: str,
                 description: str, statements: Sequence[iam.PolicyStatement] = (),
                 any_resource_reason: str | None = None, timeout: cdk.Duration = cdk.Duration.minutes(1),
                 function_name: str | None = None) -> None:
        logs_id, role_id, function_id = ids
        stack = cdk.Stack.of(scope)
        self.log_group = logs.LogGroup(scope, logs_id, retention=logs.RetentionDays.ONE_WEEK,
                                       removal_policy=cdk.RemovalPolicy.DESTROY)
        self.role = iam.Role(scope, role_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description=role_description)
        for s in statements:
            self.role.add_to_policy(s)
        if any(r == "*" for s in statements for r in s.resources):
            if not any_resource_reason:
                raise ValueError(f"{handler}: a statement on '*' needs any_resource_reason")
            nag.acknowledge(self.role, "AwsSolutions-IAM5[Resource::*]", any_resource_reason)
        self.role.add_to_policy(iam.PolicyStatement(
            sid="OwnLogs", actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[self.log_group.log_group_arn, f"{self.log_group.log_group_arn}:*"]))
        logs_lid = stack.resolve(stack.get_logical_id(self.log_group.node.default_child))
        nag.acknowledge(self.role, f"AwsSolutions-IAM5[Resource::<{logs_lid}.Arn>:*]",
                        "log streams inside the function's own log group, whose stream names Lambda chooses")
        self.function = lambda_.Function(
            scope, function_id, runtime=RUNTIME, handler=handler_name(handler), code=handler_code(handler),
            role=self.role, log_group=self.log_group, timeout=timeout, memory_size=128,
            function_name=function_name, description=description)
        # CDK makes the function wait for its role and policy and also refers to the role (GetAtt):
        # cfn-lint W3005. Each resource waits for the policy instead (resource() below).
        self.function.node.default_child.add_deletion_override("DependsOn")

    def resource(self, scope: Construct, construct_id: str, *, resource_type: str,
                 properties: Mapping[str, object], service_timeout: cdk.Duration) -> cdk.CustomResource:
        """A custom resource served by this function, invoked only once the role carries its policy."""
        made = cdk.CustomResource(scope, construct_id, service_token=self.function.function_arn,
                                  resource_type=resource_type, service_timeout=service_timeout,
                                  properties=dict(properties))
        made.node.add_dependency(self.role)
        return made
