"""Guardrails on every billable resource, on by default: nothing keeps billing by accident.

Catalog facts read: none (the backend stacks pass the instance or endpoints, the config the limits).

EC2 backends (three independent layers, so one failing does not leave an instance running):
1. On the instance, every minute (``kit-boot guard``, userdata/lib.sh): stop after
   ``idle_stop_minutes`` (the ``kit-idle-stop-minutes`` tag) without a request (vLLM's Prometheus request counters, or an open
   connection to the model port), and stop once the ``kit-ttl-expires-epoch`` tag is in the
   past. It sees requests, which CPU metrics cannot, so it is the primary idle check.
2. A CloudWatch alarm with the EC2 *stop* action: CPU below 5 % (per-minute maximum, detailed
   monitoring) for ``idle_stop_minutes + 30`` minutes, and never less than the provisioning
   window + 15 minutes. A backstop for a hung instance or a dead
   timer: an idle vLLM sits near 0 % CPU, one decoding stream keeps a core busy.
3. An EventBridge Scheduler one-time schedule calling ``ec2:StopInstances`` at the TTL: works
   even if the instance is wedged. Its role may stop only this instance.

SageMaker: an EventBridge Scheduler schedule calls ``sagemaker:DeleteEndpoint`` from the TTL on,
every ``ENDPOINT_TTL_RETRY_MINUTES`` until ``ENDPOINT_TTL_RETRY_HOURS`` later (no Lambda); its role
may delete only this endpoint. A recurring schedule, not a one-time one: an endpoint that is
``Creating`` or ``Updating`` refuses deletion, and a single attempt would leave it billing; the
calls after it is gone fail harmlessly (no such endpoint). SageMaker has no stop state, and a
CloudWatch alarm cannot delete an endpoint, so the TTL is the endpoint's guardrail. The schedule
and its role outlive a stack deletion (DeletionPolicy Retain) until Custom::EndpointTtlRelease has
seen the endpoint gone (stacks/sagemaker.py), so a rollback that could not delete a Creating
endpoint leaves it guarded. When Custom::EndpointReady gives up on an endpoint still Creating, it
starts this schedule at once instead of at the TTL (stacks/lambdas/endpoint_ready/index.py).

The TTL counts from synthesis (``cdk deploy`` synthesizes, then deploys): redeploying the
stack moves the deadline, which is how a user extends a running backend on purpose.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

TTL_TAG = "kit-ttl-expires-epoch"  # read by the instance through IMDS instance tags
IDLE_TAG = "kit-idle-stop-minutes"  # likewise: a tag, so changing it does not replace the instance
IDLE_ALARM_CPU_PERCENT = 5
IDLE_ALARM_MARGIN_MINUTES = 30
_MAX_ALARM_PERIODS = 1440  # CloudWatch: evaluation periods x period <= one day
ENDPOINT_TTL_RETRY_MINUTES = 15
ENDPOINT_TTL_RETRY_HOURS = 48  # the longest Creating seen was 3 h 26 min


def ttl_expiry(now: datetime, ttl_hours: float) -> datetime | None:
    """When the TTL ends, rounded up to the minute; None when ttl_hours is 0 (disabled)."""
    if ttl_hours <= 0:
        return None
    end = now.astimezone(timezone.utc) + timedelta(hours=ttl_hours)
    if end.second or end.microsecond:
        end = end.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return end


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scheduler_role(scope: Construct, statement: iam.PolicyStatement) -> iam.Role:
    role = iam.Role(
        scope, "TtlSchedulerRole",
        assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com", conditions={
            "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}}),
        description="EventBridge Scheduler: enforce the kit's TTL on one resource",
    )
    role.add_to_policy(statement)
    return role


def _one_time_schedule(scope: Construct, at: datetime, api: str, payload: dict, role: iam.Role,
                       description: str, repeat_until: datetime | None = None) -> scheduler.CfnSchedule:
    """``at(TTL)``; with ``repeat_until``, ``rate(ENDPOINT_TTL_RETRY_MINUTES)`` from the TTL to then
    (StartDate/EndDate bound a recurring schedule; Scheduler ignores StartDate for one-time ones)."""
    when: dict = {"schedule_expression": f"at({at.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S})"}
    retry = scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=10)
    if repeat_until is not None:
        when = {"schedule_expression": f"rate({ENDPOINT_TTL_RETRY_MINUTES} minutes)",
                "start_date": iso(at), "end_date": iso(repeat_until)}
        # The next run is the retry; an event older than the interval is dropped.
        retry = scheduler.CfnSchedule.RetryPolicyProperty(
            maximum_retry_attempts=2, maximum_event_age_in_seconds=ENDPOINT_TTL_RETRY_MINUTES * 60)
    return scheduler.CfnSchedule(
        scope, "TtlSchedule",
        description=description,
        **when,
        schedule_expression_timezone="UTC",
        flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
        target=scheduler.CfnSchedule.TargetProperty(
            arn=f"arn:{cdk.Aws.PARTITION}:scheduler:::aws-sdk:{api}",
            role_arn=role.role_arn,
            input=cdk.Stack.of(scope).to_json_string(payload),
            retry_policy=retry,
        ),
    )


class Ec2Guardrails(Construct):
    """Idle-stop alarm and TTL stop schedule for one instance (the on-instance check is in user data)."""

    def __init__(self, scope: Construct, construct_id: str, *, instance: ec2.Instance,
                 idle_stop_minutes: int, ttl_expires_at: datetime | None, provisioning_minutes: int = 0) -> None:
        super().__init__(scope, construct_id)
        self.alarm: cloudwatch.Alarm | None = None
        self.schedule: scheduler.CfnSchedule | None = None
        cdk.Tags.of(instance).add(IDLE_TAG, str(idle_stop_minutes), include_resource_types=["AWS::EC2::Instance"])
        if idle_stop_minutes > 0:
            # Never shorter than provisioning (a slow download can sit at low CPU for a while).
            periods = min(max(idle_stop_minutes + IDLE_ALARM_MARGIN_MINUTES, provisioning_minutes + 15),
                          _MAX_ALARM_PERIODS)
            self.alarm = cloudwatch.Alarm(
                self, "IdleStopAlarm",
                alarm_description=(f"Backstop idle stop: CPU max < {IDLE_ALARM_CPU_PERCENT}% for {periods} min "
                                   f"(the instance stops itself after {idle_stop_minutes} idle min)"),
                metric=cloudwatch.Metric(
                    namespace="AWS/EC2", metric_name="CPUUtilization",
                    dimensions_map={"InstanceId": instance.instance_id},
                    statistic="Maximum", period=cdk.Duration.minutes(1)),
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                threshold=IDLE_ALARM_CPU_PERCENT,
                evaluation_periods=periods,
                datapoints_to_alarm=periods,
                # A stopped instance reports nothing: that must not count as busy or idle.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            self.alarm.add_alarm_action(cw_actions.Ec2Action(cw_actions.Ec2InstanceAction.STOP))
        if ttl_expires_at is not None:
            cdk.Tags.of(instance).add(TTL_TAG, str(int(ttl_expires_at.timestamp())),
                                      include_resource_types=["AWS::EC2::Instance"])
            stack = cdk.Stack.of(self)
            instance_arn = stack.format_arn(service="ec2", resource="instance", resource_name=instance.instance_id)
            role = _scheduler_role(self, iam.PolicyStatement(actions=["ec2:StopInstances"], resources=[instance_arn]))
            self.schedule = _one_time_schedule(
                self, ttl_expires_at, "ec2:stopInstances", {"InstanceIds": [instance.instance_id]}, role,
                f"Stop the {stack.stack_name} instance at its TTL ({iso(ttl_expires_at)})")


class EndpointTtl(Construct):
    """Delete a SageMaker endpoint at its TTL."""

    def __init__(self, scope: Construct, construct_id: str, *, endpoint_name: str,
                 ttl_expires_at: datetime) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        endpoint_arn = stack.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name.lower())
        role = _scheduler_role(self, iam.PolicyStatement(actions=["sagemaker:DeleteEndpoint"], resources=[endpoint_arn]))
        self.role = role
        self.schedule = _one_time_schedule(
            self, ttl_expires_at, "sagemaker:deleteEndpoint", {"EndpointName": endpoint_name}, role,
            f"Delete SageMaker endpoint {endpoint_name} from its TTL ({iso(ttl_expires_at)}), every "
            f"{ENDPOINT_TTL_RETRY_MINUTES} min until it is gone",
            repeat_until=ttl_expires_at + timedelta(hours=ENDPOINT_TTL_RETRY_HOURS))
        # Kept when the stack deletes them: a rollback deletes them even when the endpoint's own
        # deletion failed (a Creating endpoint refuses it; cloudformation-coverage-roadmap#852),
        # and Retain holds on the rollback of the creating operation too (that is what
        # RetainExceptOnCreate differs in: DeletionPolicy attribute, CloudFormation User Guide).
        # Custom::EndpointTtlRelease (stacks/sagemaker.py) deletes them once the endpoint is gone.
        policy = role.node.find_child("DefaultPolicy").node.default_child
        # UpdateReplacePolicy stays Delete: a guard replaced by an update is superseded by the new
        # one and must not go on deleting the endpoint at the old TTL (hence cfn-lint W3011 muted).
        for resource in (self.schedule, role.node.default_child, policy):
            resource.cfn_options.deletion_policy = cdk.CfnDeletionPolicy.RETAIN
            resource.cfn_options.update_replace_policy = cdk.CfnDeletionPolicy.DELETE
            resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3011"]}})


__all__ = ["Ec2Guardrails", "EndpointTtl", "IDLE_TAG", "TTL_TAG", "ttl_expiry", "iso"]
