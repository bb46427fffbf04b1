"""Issue 11, point 10: cdk deploy does not wait silently for hours on a SageMaker endpoint stuck
in Creating (a public reproduction: 3 h 26 min, healthy and billed). Custom::EndpointReady
(stacks/endpoint_ready.py, handler stacks/lambdas/endpoint_ready/index.py) fails the stack after
sagemaker_ready_minutes with a line saying it is still billing."""
from __future__ import annotations

import json

import pytest

from stacks.config import ConfigError, parse
from stacks.lambdas.endpoint_ready import index

STARTED = 1_000_000.0


class Clock:
    def __init__(self, t: float = STARTED):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class FakeSageMaker:
    """DescribeEndpoint answers from a script: (minutes from start, status, reason)."""

    class meta:
        region_name = "us-east-1"

    def __init__(self, clock: Clock, script: list[tuple[float, str, str]]):
        self.clock, self.script, self.calls = clock, script, 0

    def describe_endpoint(self, EndpointName):
        self.calls += 1
        minutes = (self.clock.t - STARTED) / 60
        status, reason = "NotFound", ""
        for at, st, why in self.script:
            if minutes >= at:
                status, reason = st, why
        if status == "NotFound":
            raise RuntimeError("An error occurred (ValidationException) when calling the DescribeEndpoint "
                               f"operation: Could not find endpoint \"{EndpointName}\".")
        return {"EndpointName": EndpointName, "EndpointStatus": status, **({"FailureReason": reason} if reason else {})}


class Context:
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:SageMakerStack-endpoint-ready"

    def __init__(self, clock: Clock, budget_s: float = 900):
        self.clock, self.deadline = clock, clock.t + budget_s

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - self.clock.t) * 1000)


class FakeLambda:
    def __init__(self):
        self.invocations = []

    def invoke(self, **kw):
        self.invocations.append(kw)


def event(request="Create", bound=45, **extra):
    return {"RequestType": request, "StackId": "arn:aws:cloudformation:us-east-1:1:stack/SageMakerStack/x",
            "RequestId": "r", "LogicalResourceId": "ReadyReadyMlG6Xlarge", "ResponseURL": "http://unused",
            "ResourceProperties": {"EndpointName": "SageMakerStack-ml-g6-xlarge", "BoundMinutes": str(bound)}, **extra}


def drive(script, bound=45, max_hops=20):
    """Run the handler as Lambda would: each hand-over starts a fresh 15-minute invocation."""
    clock, sent, lam = Clock(), [], FakeLambda()
    sm = FakeSageMaker(clock, script)
    ev = event(bound=bound)
    for _ in range(max_hops):
        index.handler(ev, Context(clock), sm=sm, lam=lam, now=clock.now, sleep=clock.sleep,
                      send=lambda e, status, reason, data: sent.append((status, reason, data)))
        if sent:
            return sent[0], (clock.t - STARTED) / 60, lam
        ev = json.loads(lam.invocations[-1]["Payload"])
        assert lam.invocations[-1]["InvocationType"] == "Event"
    raise AssertionError("never answered")


def test_in_service_in_nine_minutes_succeeds():
    (status, reason, data), minutes, lam = drive([(0.5, "Creating", ""), (9, "InService", "")])
    assert status == "SUCCESS" and data == {"Status": "InService"} and 9 <= minutes < 10
    assert lam.invocations == []


def test_stuck_in_creating_fails_at_the_bound_saying_it_bills_and_what_to_run():
    # The public reproduction's outlier: InService only after 3 h 26 min.
    (status, reason, _), minutes, lam = drive([(0.5, "Creating", ""), (206, "InService", "")], bound=45)
    assert status == "FAILED" and 45 <= minutes < 46
    assert "still Creating after 45 min" in reason and "billed" in reason
    assert "aws sagemaker delete-endpoint --endpoint-name SageMakerStack-ml-g6-xlarge --region us-east-1" in reason
    assert "\n" not in reason and len(reason) <= 1000
    # 45 minutes is more than one Lambda invocation: it handed over with the same start time.
    assert len(lam.invocations) >= 3
    assert {json.loads(i["Payload"])["KitStartedAt"] for i in lam.invocations} == {STARTED}


def test_a_failed_endpoint_fails_with_sagemakers_reason():
    (status, reason, _), minutes, _ = drive([(0.5, "Creating", ""), (6, "Failed", "The primary container did not pass the ping health check")])
    assert status == "FAILED" and minutes < 7
    assert reason.endswith("failed: The primary container did not pass the ping health check")


def test_delete_answers_at_once():
    sent = []
    index.handler(event("Delete"), None, send=lambda e, s, r, d: sent.append(s))
    assert sent == ["SUCCESS"]


def test_the_bound_is_configuration_within_what_cloudformation_allows():
    assert parse({"backends": "sagemaker"}).sagemaker_ready_minutes == 45
    assert parse({"backends": "sagemaker", "sagemaker_ready_minutes": "30"}).sagemaker_ready_minutes == 30
    with pytest.raises(ConfigError, match="sagemaker_ready_minutes=90.*15 to 55"):
        parse({"sagemaker_ready_minutes": 90})


def test_each_endpoint_has_a_bounded_watch_beside_it(kit):
    t = kit.templates["SageMakerStack"]
    (lid, watch), = kit.resources("SageMakerStack", "Custom::EndpointReady").items()
    p = watch["Properties"]
    assert p["EndpointName"] == "SageMakerStack-ml-g6-xlarge" and p["BoundMinutes"] == "45"
    assert int(p["ServiceTimeout"]) == 45 * 60 + 300 <= 3600  # CustomResource ServiceTimeout: 1-3600
    endpoint_id, _ = kit.one("SageMakerStack", "AWS::SageMaker::Endpoint")
    assert endpoint_id not in watch.get("DependsOn", [])  # it runs while the endpoint is created
    fn = t["Resources"][p["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    assert fn["Timeout"] == 900 and fn["Handler"] == "index.handler"
    # Its role: describe this endpoint, invoke itself (the hand-over), write its own logs.
    policies = [pol for pol in kit.resources("SageMakerStack", "AWS::IAM::Policy").values()
                if "Ready" in pol["Properties"]["PolicyName"]]
    (pol,) = policies
    actions = {s["Sid"]: s["Action"] for s in pol["Properties"]["PolicyDocument"]["Statement"]}
    assert actions == {"DescribeOwnEndpoints": "sagemaker:DescribeEndpoint", "HandOverToItself": "lambda:InvokeFunction",
                       "OwnLogs": ["logs:CreateLogStream", "logs:PutLogEvents"]}
    invoke = next(s for s in pol["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "HandOverToItself")
    assert json.dumps(invoke["Resource"]).endswith(f':function:{fn["FunctionName"]}"]]}}')


def test_registry_fact_the_bound_improves_on():
    """CloudFormation's own wait: the AWS::SageMaker::Endpoint create handler's timeout (registry schema)."""
    from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::SageMaker::Endpoint").schema
    assert schema["handlers"]["create"]["timeoutInMinutes"] == 160
