"""`python -m harness.package start`: starts the CodeBuild build, prints its log as it arrives,
says where it failed, or the S3 URI it published. Fake clients stand in for AWS."""
from __future__ import annotations

import sys

import pytest

from harness.package.remote import EMPTY_READS_AT_END, start


class FakeLogs:
    class exceptions:  # noqa: N801 - mimics the boto3 client attribute of that name
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self, pages):
        self.pages = pages  # token -> (events, next token)

    def get_log_events(self, logGroupName, logStreamName, startFromHead, nextToken=None):
        if nextToken is None and "missing" in self.pages:
            self.pages.pop("missing")
            raise self.exceptions.ResourceNotFoundException()
        events, nxt = self.pages.get(nextToken, ([], nextToken))
        return {"events": [{"message": m + "\n"} for m in events], "nextForwardToken": nxt}


class FakeCodeBuild:
    def __init__(self, statuses, phases=()):
        self.statuses = list(statuses)
        self.phases = list(phases)
        self.started = None

    def start_build(self, projectName, environmentVariablesOverride):
        self.started = (projectName, {v["name"]: v["value"] for v in environmentVariablesOverride})
        return {"build": {"id": "inference-kit-package:1"}}

    def batch_get_builds(self, ids):
        status = self.statuses.pop(0)
        return {"builds": [{"id": ids[0], "buildStatus": status, "phases": self.phases,
                            "logs": {"groupName": "/aws/codebuild/inference-kit-package", "streamName": "1"}}]}


class FakeSsm:
    def get_parameter(self, Name):
        assert Name == "/inference-kit/package/emb4"
        return {"Parameter": {"Value": "s3://inference-kit-packages-1-us-east-1/package/emb4/1"}}


def test_success_prints_log_lines_once_and_the_published_uri():
    cb = FakeCodeBuild(["IN_PROGRESS", "IN_PROGRESS", "SUCCEEDED"])
    logs = FakeLogs({"missing": True, None: (["installing"], "t1"), "t1": (["packing", "uploaded"], "t2")})
    lines = []
    rc = start("emb4", codebuild=cb, logs=logs, ssm=FakeSsm(), log=lines.append, sleep=lambda _: None)
    assert rc == 0
    assert cb.started == ("inference-kit-package", {"SCHEME": "emb4", "SOURCE": "", "REVISION": ""})
    assert lines[1:4] == ["installing", "packing", "uploaded"]
    assert lines[-1].endswith("SUCCEEDED: s3://inference-kit-packages-1-us-east-1/package/emb4/1 "
                              "(in /inference-kit/package/emb4)")


def test_failure_names_the_phase_and_exits_non_zero():
    cb = FakeCodeBuild(["FAILED"], phases=[{"phaseType": "INSTALL", "phaseStatus": "SUCCEEDED"},
                                           {"phaseType": "BUILD", "phaseStatus": "FAILED"}])
    logs = FakeLogs({None: (["error: model.language_model.layers.2.mlp.down_proj.weight: group 1 of row 3 ..."],
                            "t1")})
    lines = []
    rc = start("ple4", source="google/gemma-4-E4B-it-qat-q4_0-unquantized", codebuild=cb, logs=logs,
               ssm=None, log=lines.append, sleep=lambda _: None)
    assert rc == 1
    assert cb.started[1]["SOURCE"] == "google/gemma-4-E4B-it-qat-q4_0-unquantized"
    assert any(ln.startswith("error: model.language_model") for ln in lines)
    assert lines[-1] == "build inference-kit-package:1 FAILED in phase BUILD; the log lines above say why"


class FakeBoto3:
    """Records the region each client is made in; the clients fail so `start` stops at once."""

    def __init__(self):
        self.regions = {}

    def client(self, name, region_name=None):
        self.regions[name] = region_name

        class Client:
            def start_build(self, **_):
                raise RuntimeError("stop here")

        return Client()


@pytest.mark.parametrize("argv, expected", [
    (["--region", "eu-west-1"], "eu-west-1"),
    ([], None),  # None: the kit's region from cdk.json, below
])
def test_start_uses_the_kits_region_not_the_shells(monkeypatch, capsys, argv, expected):
    # The kit deploys PackageStack to its own region (kit/regions.py); boto3 without a
    # region_name would use the shell's AWS_DEFAULT_REGION and find no project there.
    from harness.package.__main__ import main
    from kit.regions import resolve

    fake = FakeBoto3()
    monkeypatch.setitem(sys.modules, "boto3", fake)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    expected = expected or resolve(None).region
    assert expected != "ap-south-1"
    assert main(["start", "--scheme", "emb4", *argv]) == 2
    assert fake.regions["codebuild"] == expected and fake.regions["logs"] == expected
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: cannot start inference-kit-package in {expected} (RuntimeError: stop here)")


def test_start_refuses_a_bad_region_in_one_line(capsys):
    from harness.package.__main__ import main

    assert main(["start", "--region", "mars-1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --region='mars-1'")


class LaggingLogs:
    """A stream whose lines reach CloudWatch later than the build's status says it ended: line i
    becomes readable at read number `arrive[i]` (AWS's follower reads on for that reason,
    aws-actions/aws-codebuild-run-build code.js)."""

    class exceptions:  # noqa: N801 - mimics the boto3 client attribute of that name
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self, lines):
        self.lines = lines  # (readable from read n, text)
        self.reads = 0

    def get_log_events(self, logGroupName, logStreamName, startFromHead, nextToken=None):
        self.reads += 1
        start = int(nextToken or 0)
        ready = [text for n, text in self.lines if n <= self.reads]
        return {"events": [{"message": m + "\n"} for m in ready[start:]], "nextForwardToken": str(len(ready))}


def test_lines_that_arrive_after_the_build_ended_are_still_printed():
    cb = FakeCodeBuild(["IN_PROGRESS", "FAILED"], phases=[{"phaseType": "BUILD", "phaseStatus": "FAILED"}])
    logs = LaggingLogs([(1, "packing"), (5, "error: off-grid group in embed_tokens"),
                        (8, "Phase complete: BUILD State: FAILED")])
    lines = []
    assert start("emb4", codebuild=cb, logs=logs, ssm=None, log=lines.append, sleep=lambda _: None) == 1
    assert lines[1:] == ["packing", "error: off-grid group in embed_tokens", "Phase complete: BUILD State: FAILED",
                         "build inference-kit-package:1 FAILED in phase BUILD; the log lines above say why"]


def test_every_call_and_field_matches_botocores_service_models():
    # botocore's Stubber refuses a parameter or a response field its service model does not
    # define (codebuild 2016-10-06, logs 2014-03-28, ssm 2014-11-06, as installed from constraints.txt).
    import botocore.session
    from botocore.stub import Stubber

    session = botocore.session.get_session()
    make = lambda name: session.create_client(name, region_name="us-east-1", aws_access_key_id="x",  # noqa: E731
                                              aws_secret_access_key="x")
    cb, logs, ssm = make("codebuild"), make("logs"), make("ssm")
    group, stream = "/aws/codebuild/inference-kit-package", "0b1c2d3e"
    build = {"id": "inference-kit-package:0b1c2d3e", "buildStatus": "SUCCEEDED", "currentPhase": "COMPLETED",
             "phases": [{"phaseType": "BUILD", "phaseStatus": "SUCCEEDED"}, {"phaseType": "COMPLETED"}],
             "logs": {"groupName": group, "streamName": stream}}
    with Stubber(cb) as c, Stubber(logs) as lg, Stubber(ssm) as s:
        c.add_response("start_build", {"build": {"id": build["id"]}}, {
            "projectName": "inference-kit-package",
            "environmentVariablesOverride": [{"name": "SCHEME", "value": "emb4", "type": "PLAINTEXT"},
                                             {"name": "SOURCE", "value": "", "type": "PLAINTEXT"},
                                             {"name": "REVISION", "value": "", "type": "PLAINTEXT"}]})
        c.add_response("batch_get_builds", {"builds": [build]}, {"ids": [build["id"]]})
        first = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
        lg.add_response("get_log_events", {"events": [{"timestamp": 1, "message": "published\n"}],
                                           "nextForwardToken": "f/1"}, first)
        for _ in range(1 + EMPTY_READS_AT_END):
            lg.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"}, {**first, "nextToken": "f/1"})
        s.add_response("get_parameter", {"Parameter": {"Name": "/inference-kit/package/emb4", "Value": "s3://b/p/1"}},
                       {"Name": "/inference-kit/package/emb4"})
        lines = []
        assert start("emb4", codebuild=cb, logs=logs, ssm=ssm, log=lines.append, sleep=lambda _: None) == 0
        c.assert_no_pending_responses()
        lg.assert_no_pending_responses()
    assert lines[1:] == ["published", f"build {build['id']} SUCCEEDED: s3://b/p/1 (in /inference-kit/package/emb4)"]


# A fresh account's StartBuild refusal, said in one true line. Errors replayed
# through a real codebuild client (Stubber: the request must fit StartBuild's input shape); the
# message as public reports quote it (kit/codebuild.py).

def refused(code: str, message: str):
    from tests.harness.aws_replay import Error, Replay

    cb = Replay("codebuild", lambda op, params: Error(code, message), region="eu-west-1")
    with pytest.raises(Exception) as e:
        start("emb4", region="eu-west-1", codebuild=cb, logs=object(), ssm=None, log=lambda _: None,
              sleep=lambda _: None)
    assert [op for op, _ in cb.calls] == ["start_build"]
    line = str(e.value)
    assert "\n" not in line
    return line


def test_a_zero_build_queue_says_the_quota_and_the_command_that_raises_it():
    line = refused("AccountLimitExceededException", "Cannot have more than 0 builds in queue for the account")
    assert line.startswith("cannot start inference-kit-package in eu-west-1: CodeBuild lets this account queue no "
                           "build of this project's compute type there")
    assert "'Concurrently running builds for Linux/Large environment' limit is 0" in line
    assert ("fix: aws service-quotas request-service-quota-increase --service-code codebuild --quota-code "
            "L-4DDC4A99 --desired-value 1 --region eu-west-1") in line
    assert "deploy it first" not in line  # the old line blamed a missing stack


def test_a_full_queue_is_not_called_a_zero_quota():
    line = refused("AccountLimitExceededException", "Cannot have more than 5 builds in queue for the account")
    assert "queue for this account is full, 5 builds" in line and "limit is 0" not in line
    assert "L-4DDC4A99" in line


def test_a_missing_project_says_deploy_it_first():
    line = refused("ResourceNotFoundException", "Project cannot be found: arn:aws:codebuild:eu-west-1:123456789012:"
                                                "project/inference-kit-package")
    assert "the project does not exist there" in line and "npx cdk deploy PackageStack" in line


def test_any_other_refusal_is_passed_on_without_a_guess():
    line = refused("AccessDeniedException", "User is not authorized to perform: codebuild:StartBuild")
    assert line == ("cannot start inference-kit-package in eu-west-1 (AccessDeniedException: User is not authorized "
                    "to perform: codebuild:StartBuild)")


def test_the_project_is_built_with_the_environment_whose_quota_is_checked(tmp_path):
    # The quota code follows from the synthesized project, not from a second copy of the compute type.
    from kit.codebuild import CONCURRENT_BUILD_QUOTAS, package_build_quota
    from tests.stacks.conftest import synth

    k = synth(tmp_path, backends="g6", g6_model="package")
    (_, project), = k.resources("PackageStack", "AWS::CodeBuild::Project").items()
    env = project["Properties"]["Environment"]
    assert CONCURRENT_BUILD_QUOTAS[(env["Type"], env["ComputeType"])] == package_build_quota()
    assert package_build_quota()[0] == "L-4DDC4A99"
