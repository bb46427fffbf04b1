"""A bounded wait for SageMaker endpoints: ``cdk deploy`` fails with a clear reason, saying the
endpoint is still billing, instead of waiting silently for hours (issue 11 point 10).

What CloudFormation offers for AWS::SageMaker::Endpoint: no CreationPolicy (only
AutoScalingGroup, EC2 Instance, WaitCondition and AppStream Fleet take one: CreationPolicy
attribute, User Guide) and a handler timeout of 160 minutes (the resource's registry schema,
``handlers.create.timeoutInMinutes``, as cfn-lint ships it). A stack-level timeout exists only
for CreateStack (``TimeoutInMinutes``), not for the change sets ``cdk deploy`` executes. So a
``Custom::EndpointReady`` per endpoint (handler: stacks/lambdas/endpoint_ready/index.py) runs
beside it and fails the stack after ``sagemaker_ready_minutes``; its ``ServiceTimeout`` (at most
3600 s, AWS::CloudFormation::CustomResource) is the backstop should the function never answer.
An endpoint still ``Creating`` at the bound has its retained TTL schedule started at once, so its
deletion is under way when the stack fails (issue 24 point 5; the handler's module docstring).

Catalog facts read: none.
"""
from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks import nag
from stacks.guardrails import EndpointTtl
from stacks.lambda_code import handler_code, handler_name

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
        log_group = logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_WEEK,
                                  removal_policy=cdk.RemovalPolicy.DESTROY)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description="Custom::EndpointReady: watch this stack's SageMaker endpoints")
        self.role.add_to_policy(iam.PolicyStatement(
            sid="DescribeOwnEndpoints", actions=["sagemaker:DescribeEndpoint"],
            resources=[stack.format_arn(service="sagemaker", resource="endpoint", resource_name=n.lower())
                       for n in endpoint_names]))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="HandOverToItself", actions=["lambda:InvokeFunction"],
            resources=[stack.format_arn(service="lambda", resource="function", resource_name=self.function_name,
                                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)]))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="OwnLogs", actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[log_group.log_group_arn, f"{log_group.log_group_arn}:*"]))
        logs_id = stack.resolve(stack.get_logical_id(log_group.node.default_child))
        nag.acknowledge(self.role, f"AwsSolutions-IAM5[Resource::<{logs_id}.Arn>:*]",
                        "log streams inside the function's own log group, whose stream names Lambda chooses")
        self.function = lambda_.Function(
            self, "Function", function_name=self.function_name, runtime=lambda_.Runtime.PYTHON_3_14,
            handler=handler_name("endpoint_ready"), role=self.role, log_group=log_group, memory_size=128,
            code=handler_code("endpoint_ready"),
            timeout=cdk.Duration.minutes(15),
            description="Custom::EndpointReady: bounded wait for InService (stacks/endpoint_ready.py)")
        self.function.node.default_child.add_deletion_override("DependsOn")  # cfn-lint W3005; see az_choice.py

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
        watch = cdk.CustomResource(
            self, construct_id, service_token=self.function.function_arn, resource_type="Custom::EndpointReady",
            service_timeout=cdk.Duration.seconds(bound_minutes * 60 + MARGIN_S), properties=props)
        watch.node.add_dependency(self.role)  # its policy is attached before the first poll
        return watch
