"""Custom resource Custom::EndpointReady: a bounded wait for one SageMaker endpoint.

CloudFormation's own wait for AWS::SageMaker::Endpoint lasts up to its handler timeout (160
minutes in the resource's registry schema, ``handlers.create.timeoutInMinutes``), and an endpoint
can sit in ``Creating`` for hours while its container already answers ``/ping`` (a public
reproduction saw 3 h 26 min; the other 20 endpoints took at most 11.3 min), billed all along.
This resource runs beside the endpoint (it does not depend on it) and polls ``DescribeEndpoint``:

- ``InService``: success, ``cdk deploy`` goes on;
- ``Failed``: failure with SageMaker's ``FailureReason``;
- still not ``InService`` after ``BoundMinutes``: failure with one line saying the endpoint is still
  billing and what to run, so the stack fails (and rolls back) instead of waiting silently.

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


def status_of(sm: Any, name: str) -> tuple[str, str]:
    """(EndpointStatus, FailureReason); ("NotFound", "") before the endpoint exists."""
    try:
        d = sm.describe_endpoint(EndpointName=name)
    except Exception as e:  # noqa: BLE001 - botocore ClientError without importing botocore
        if "Could not find endpoint" in str(e) or "ValidationException" in str(e):
            return "NotFound", ""
        raise
    return d["EndpointStatus"], d.get("FailureReason", "")


def step(event: Mapping[str, Any], sm: Any, region: str, now: Callable[[], float],
         remaining_ms: Callable[[], int], sleep: Callable[[float], None]) -> tuple[str, str, dict] | None:
    """Poll until an answer is due: (status, reason, data), or None when time ran out (hand over)."""
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
            return "FAILED", billing_line(name, region, status, minutes, bound), {}
        if remaining_ms() < RESERVE_MS:
            return None
        sleep(POLL_S)


def respond(event: Mapping[str, Any], status: str, reason: str, data: Mapping[str, str]) -> None:
    """The response, with the endpoint's name as the physical id."""
    cfn_response.respond(event, status, event["ResourceProperties"]["EndpointName"], data, reason)


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - ResourceNotFoundException / NoSuchEntity: already gone
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
    except Exception as e:  # noqa: BLE001
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
        answer = step(event, sm, sm.meta.region_name, now, context.get_remaining_time_in_millis, sleep)
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
