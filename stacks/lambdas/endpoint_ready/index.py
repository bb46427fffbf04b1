"""Custom resource Custom::EndpointReady: a bounded wait for one SageMaker endpoint.

CloudFormation's own wait for AWS::SageMaker::Endpoint lasts up to its handler timeout (160
minutes in the resource's registry schema, ``handlers.create.timeoutInMinutes``), and an endpoint
can sit in ``Creating`` for hours while its container already answers ``/ping`` (a public
reproduction saw 3 h 26 min; the other 20 endpoints took at most 11.3 min), billed all along.
This resource runs beside the endpoint (it does not depend on it) and polls ``DescribeEndpoint``:

- ``InService``: success, ``cdk deploy`` goes on;
- ``Failed``: failure with SageMaker's ``FailureReason``;
- still not ``InService`` after ``BoundMinutes``: failure with one line saying the endpoint is still
  billing and what is already being done about it, so the stack fails (and rolls back) instead of
  waiting silently. A ``Creating`` endpoint refuses DeleteEndpoint (aws/amazon-sagemaker-examples#3432),
  so the rollback cannot delete it either; its retained TTL schedule (``ScheduleName``, stacks/guardrails.py)
  would only start retrying DeleteEndpoint at the TTL, hours later (~$8 an incident on ml.g6.xlarge).
  So, before answering, this pulls that schedule forward (``pull_forward``): it starts now, with the
  same retry rate and window, and deletes the endpoint at the first try after it leaves ``Creating``.
  Not for ``Updating``: the rollback restores the endpoint's previous configuration, which must not
  be deleted. Without a TTL (``ttl_hours=0``) there is no schedule, and the line says what to run.

A Lambda invocation lasts 15 minutes at most: before its time runs out the function invokes
itself asynchronously with the same event and the time it started (``KitStartedAt``), and only
the last invocation answers CloudFormation. Update waits again (a new endpoint config puts the
endpoint in ``Updating``); Delete does nothing.

The same function answers ``Custom::EndpointTtlRelease`` (one per endpoint, which the endpoint
depends on): the endpoint's TTL schedule and its role are kept by CloudFormation on delete
(DeletionPolicy Retain), because a rollback deletes them even when the endpoint's own deletion
failed (cloudformation-coverage-roadmap#852), and a ``Creating`` endpoint refuses deletion. On
Delete this resource looks at the endpoint: still busy (``Creating``, ``Updating``: deletion
refused), it leaves both, so the schedule keeps deleting the endpoint every 15 minutes up to its end
date, and says so; otherwise (gone, or in service when an update turned the TTL off) it deletes
the schedule and the role. Create and Update do nothing.

Self-contained (boto3 and the standard library); tests import it.
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from .. import cfn_response

POLL_S = 30
RESERVE_MS = 90_000  # hand over to a fresh invocation with this much time left


def billing_line(name: str, region: str, status: str, minutes: float, bound: int) -> str:
    return (f"SageMaker endpoint {name} is still {status} after {minutes:.0f} min (bound {bound} min, "
            f"sagemaker_ready_minutes); it is billed while it is {status}. The stack now rolls back; "
            f"a Creating endpoint refuses deletion, so if it is left behind run `aws sagemaker delete-endpoint "
            f"--endpoint-name {name} --region {region}` once `aws sagemaker describe-endpoint` no longer says "
            f"{status} (the TTL schedule, if it exists, retries that every 15 min)")


def deleting_line(name: str, region: str, minutes: float, bound: int, schedule: str, every: str,
                  until: datetime) -> str:
    """The failure reason once the TTL schedule has been pulled forward: what is already happening."""
    return (f"SageMaker endpoint {name} is still Creating after {minutes:.0f} min (bound {bound} min, "
            f"sagemaker_ready_minutes) and billed while it is. Its deletion has started: the TTL schedule "
            f"{schedule} now calls DeleteEndpoint {every} from now until {until:%Y-%m-%dT%H:%MZ} (a Creating "
            f"endpoint refuses deletion; the first call after it leaves Creating deletes it). The stack rolls "
            f"back. Nothing to run; to watch: aws sagemaker describe-endpoint --endpoint-name {name} "
            f"--region {region}")


def pull_forward(scheduler: Any, schedule: str, now: float) -> tuple[str, datetime]:
    """Start the endpoint's TTL schedule now, keeping its rate and the length of its window:
    (its expression, its new end). UpdateSchedule replaces every field ("if you do not set an
    optional field in your request, that field will be set to its system-default value": Scheduler
    API reference, UpdateSchedule, which recommends GetSchedule first), so what GetSchedule
    returned is sent back; Scheduler refuses a StartDate "earlier than 5 minutes ago" (getmoto/moto#8172
    quotes the service's message), and ``now`` is not."""
    s = scheduler.get_schedule(Name=schedule)
    start = datetime.fromtimestamp(now, timezone.utc)
    old_start, old_end = s.get("StartDate"), s.get("EndDate")
    end = start + (old_end - old_start) if old_start and old_end else start
    end = max(end, old_end) if old_end else end
    keep = {k: s[k] for k in ("GroupName", "ScheduleExpressionTimezone", "KmsKeyArn", "ActionAfterCompletion")
            if s.get(k)}
    note = f"; started early at {start:%Y-%m-%dT%H:%MZ}: the endpoint was still Creating at the ready bound"
    scheduler.update_schedule(Name=schedule, ScheduleExpression=s["ScheduleExpression"], StartDate=start,
                              EndDate=end, Description=(s.get("Description", "") + note)[-512:], State="ENABLED",
                              FlexibleTimeWindow=s["FlexibleTimeWindow"], Target=s["Target"], **keep)
    return s["ScheduleExpression"], end


def _every(expression: str) -> str:
    """'rate(15 minutes)' -> 'every 15 minutes'."""
    return "every " + expression[5:-1] if expression.startswith("rate(") else f"on {expression}"


def status_of(sm: Any, name: str) -> tuple[str, str]:
    """(EndpointStatus, FailureReason); ("NotFound", "") before the endpoint exists."""
    try:
        d = sm.describe_endpoint(EndpointName=name)
    except Exception as e:
        if "Could not find endpoint" in str(e) or "ValidationException" in str(e):
            return "NotFound", ""
        raise
    return d["EndpointStatus"], d.get("FailureReason", "")


def step(event: Mapping[str, Any], sm: Any, region: str, now: Callable[[], float],
         remaining_ms: Callable[[], int], sleep: Callable[[float], None],
         scheduler: Callable[[], Any] = lambda: None) -> tuple[str, str, dict] | None:
    """Poll until an answer is due: (status, reason, data), or None when time ran out (hand over).
    ``scheduler`` makes the Scheduler client, asked for only when the bound is reached."""
    props = event["ResourceProperties"]
    name, bound = props["EndpointName"], int(props["BoundMinutes"])
    started = float(event.get("KitStartedAt") or now())
    while True:
        status, why = status_of(sm, name)
        minutes = (now() - started) / 60
        if status == "InService":
            return "SUCCESS", f"{name} InService after {minutes:.0f} min", {"Status": status}
        if status == "Failed":
            return "FAILED", f"SageMaker endpoint {name} failed: {why or 'no FailureReason given'}", {}
        if minutes >= bound:
            return "FAILED", give_up(props, status, region, minutes, bound, scheduler, now()), {}
        if remaining_ms() < RESERVE_MS:
            return None
        sleep(POLL_S)


def give_up(props: Mapping[str, Any], status: str, region: str, minutes: float, bound: int,
            scheduler: Callable[[], Any], now: float) -> str:
    """The failure reason at the bound; for a Creating endpoint with a TTL schedule, after pulling
    the schedule forward (when that fails, the reason says so and what to run)."""
    name, schedule = props["EndpointName"], props.get("ScheduleName", "")
    line = billing_line(name, region, status, minutes, bound)
    if status != "Creating" or not schedule:
        return line
    try:
        expression, until = pull_forward(scheduler(), schedule, now)
    except Exception as e:  # noqa: BLE001 - the stack must still fail, with what to do by hand
        return f"{line}. Could not start the TTL schedule {schedule} early ({type(e).__name__}: {e})"
    return deleting_line(name, region, minutes, bound, schedule, _every(expression), until)


def respond(event: Mapping[str, Any], status: str, reason: str, data: Mapping[str, str]) -> None:
    """The response, with the endpoint's name as the physical id."""
    cfn_response.respond(event, status, event["ResourceProperties"]["EndpointName"], data, reason)


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception as e:
        if "NotFound" not in type(e).__name__ and "NoSuchEntity" not in type(e).__name__ \
                and "NotFound" not in str(e) and "NoSuchEntity" not in str(e):
            raise


# Statuses of an endpoint in transition (EndpointStatus, SageMaker API reference), in which a
# Creating or Updating one refuses DeleteEndpoint (stacks/guardrails.py): the guard must stay. Any other status
# while this resource is deleted means the endpoint was not being deleted at all (an update that
# turned the TTL off) or is going away, and the guard goes.
BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack")


def release(props: Mapping[str, Any], sm: Any, scheduler: Any, iam: Any) -> str:
    """Delete the endpoint's TTL schedule and role unless the endpoint is busy; then keep them."""
    name, schedule, role = props["EndpointName"], props["ScheduleName"], props["RoleName"]
    status, _ = status_of(sm, name)
    if status in BUSY:
        return (f"SageMaker endpoint {name} is still {status}: its TTL schedule {schedule} and role {role} stay "
                f"(the schedule deletes the endpoint every 15 min until its end date); once the endpoint is gone, "
                f"`aws scheduler delete-schedule --name {schedule}` and delete the role {role}")
    _ignore_missing(lambda: scheduler.delete_schedule(Name=schedule))
    try:
        policies = iam.list_role_policies(RoleName=role)["PolicyNames"]
    except Exception as e:
        if "NoSuchEntity" in type(e).__name__ or "NoSuchEntity" in str(e):
            return f"endpoint {name} is gone; schedule {schedule} deleted, role {role} was already gone"
        raise
    for policy in policies:
        _ignore_missing(lambda policy=policy: iam.delete_role_policy(RoleName=role, PolicyName=policy))
    _ignore_missing(lambda: iam.delete_role(RoleName=role))
    return f"endpoint {name} is {'gone' if status == 'NotFound' else status}; its TTL schedule {schedule} and role {role} deleted"


def handler(event: dict, context: Any, sm: Any = None, lam: Any = None, send=respond,
            now: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
            scheduler: Any = None, iam: Any = None) -> None:
    if event.get("ResourceType") == "Custom::EndpointTtlRelease":
        if event["RequestType"] != "Delete":
            return send(event, "SUCCESS", "nothing to do before the stack is deleted", {})
        try:
            import boto3

            reason = release(event["ResourceProperties"], sm or boto3.client("sagemaker"),
                             scheduler or boto3.client("scheduler"), iam or boto3.client("iam"))
        except Exception as e:  # noqa: BLE001 - keep the guard, never block the delete
            reason = f"TTL schedule and role left in place ({type(e).__name__}: {e})"
        print(json.dumps({"release": reason}))
        return send(event, "SUCCESS", reason, {})
    if event["RequestType"] == "Delete":
        return send(event, "SUCCESS", "nothing to delete", {})
    event = {**event, "KitStartedAt": event.get("KitStartedAt") or now()}
    try:
        import boto3

        sm = sm or boto3.client("sagemaker")
        answer = step(event, sm, sm.meta.region_name, now, context.get_remaining_time_in_millis, sleep,
                      lambda: scheduler or boto3.client("scheduler"))
    except Exception as e:  # noqa: BLE001 - any error still answers CloudFormation, with its reason
        return send(event, "FAILED", f"{type(e).__name__}: {e}", {})
    if answer is None:  # out of time: a fresh invocation carries on with the same clock
        lam = lam or boto3.client("lambda")
        lam.invoke(FunctionName=context.invoked_function_arn, InvocationType="Event",
                   Payload=json.dumps(event).encode())
        return None
    status, reason, data = answer
    print(json.dumps({"status": status, "reason": reason}))
    return send(event, status, reason, data)
