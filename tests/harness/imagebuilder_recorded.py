"""Image Builder, EC2, KMS and CloudWatch Logs answers for the harness.account.images tests, replayed
through botocore's Stubber (tests/harness/aws_replay.py validates every one against the service
model).

Where the shapes and values come from (kept as they are, with the kit's names and ids):
- aws/aws-cli awscli/examples/imagebuilder/: ``start-image-pipeline-execution.rst`` (the answer
  carries ``imageBuildVersionArn`` ``.../image/<recipe>/<version>/<build>``), ``get-image.rst``
  (``state.status`` BUILDING, ``version`` "1.0.0/1"), ``list-workflow-executions.rst`` (BUILD then
  TEST workflows, ``wf-...`` ids, step counts), ``list-workflow-step-executions.rst`` (the build
  workflow's seven steps LaunchBuildInstance/LaunchInstance with outputs ``{"instanceId": ...}``,
  ApplyBuildComponents/ExecuteComponents, InventoryCollection, RunSanitizeScript,
  RunSysPrepScript, CreateOutputAMI/CreateImage, TerminateBuildInstance/TerminateInstance with
  inputs ``{"instanceId": ...}``), ``list-image-pipelines.rst`` and ``list-image-pipeline-images.rst``.
- Image Builder User Guide, "Manage image build versions" (list-image-build-versions output):
  ``outputResources.amis[]`` with region, image, name, description, accountId.
- Image Builder User Guide, Troubleshoot: a failed build's message is "Workflow Execution ID:
  wf-... failed with reason: ...".
- The failing command's output in the log below is what the kit's own component prints
  (ami/components/vllm-sm75-build.yaml runs pip and cmake); its wording here is illustrative.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from tests.harness.aws_replay import Error, Replay

ACCOUNT = "123456789012"
REGION = "us-east-1"
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def pipeline_arn(name: str) -> str:
    return f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image-pipeline/{name}"


def build_arn(name: str, version: str = "1.0.4660/1") -> str:
    return f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image/{name}/{version}"


def _step(n: int, name: str, action: str, status: str, start: float, end: float | None = None,
          inputs: dict | None = None, outputs: dict | None = None, message: str | None = None) -> dict:
    s: dict[str, Any] = {"stepExecutionId": f"step-a1b2c3d4-5678-90ab-cdef-EXAMPLE{n:05d}", "name": name,
                         "action": action, "status": status, "startTime": at(start).isoformat()}
    if end is not None:
        s["endTime"] = at(end).isoformat()
    if inputs is not None:
        s["inputs"] = json.dumps(inputs)
    if outputs is not None:
        s["outputs"] = json.dumps(outputs)
    if message:
        s["message"] = message
    return s


@dataclass
class Build:
    """One build as it goes: each stage is what GetImage and the workflow calls say at one poll."""

    name: str  # the pipeline's (= recipe's) name
    instance: str = "i-0a1b2c3d4e5f60718"
    instance_type: str = "g6.xlarge"
    ami: str = "ami-0abcdef1234567890"
    fail: bool = False
    tests: bool = True
    polls: int = 0
    seen: int = 0  # the stage GetImage reported last: the workflow calls of the same poll agree with it
    minutes: list[float] = field(default_factory=lambda: [5, 40, 55, 62])

    def stage(self) -> int:
        return min(self.polls, 3)

    def shown(self) -> int:
        return self.seen

    def image(self) -> dict:
        st = self.stage()
        status = ["BUILDING", "BUILDING", "TESTING", "AVAILABLE"][st]
        if self.fail and st >= 1:
            status = "FAILED"
        img: dict[str, Any] = {
            "arn": build_arn(self.name), "type": "AMI", "name": self.name, "version": "1.0.4660/1",
            "platform": "Linux", "enhancedImageMetadataEnabled": True, "state": {"status": status},
            "sourcePipelineArn": pipeline_arn(self.name), "dateCreated": at(0).isoformat(), "tags": {}}
        if status == "FAILED":
            img["state"]["reason"] = ("Workflow Execution ID: wf-a1b2c3d4-5678-90ab-cdef-EXAMPLE33333 failed with "
                                      "reason: Step failed: ApplyBuildComponents")
        if status == "AVAILABLE":
            img["outputResources"] = {"amis": [{"region": REGION, "image": self.ami,
                                                "name": f"{self.name}-2026-12-01T09-00-00.000Z",
                                                "description": "the kit's image", "accountId": ACCOUNT}]}
        return img

    def workflows(self) -> list[dict]:
        st = self.shown()
        end = None if st == 0 else 45
        out = [{"workflowBuildVersionArn": f"arn:aws:imagebuilder:{REGION}:aws:workflow/build/build-image/1.0.3/1",
                "workflowExecutionId": "wf-a1b2c3d4-5678-90ab-cdef-EXAMPLE33333", "type": "BUILD",
                "status": "RUNNING" if st == 0 else ("FAILED" if self.fail else "COMPLETED"),
                "totalStepCount": 7, "startTime": at(0).isoformat(), **({"endTime": at(end).isoformat()} if end else {}),
                "retried": False}]
        if st >= 2 and not self.fail and self.tests:
            out.append({"workflowBuildVersionArn": f"arn:aws:imagebuilder:{REGION}:aws:workflow/test/test-image/1.0.3/1",
                        "workflowExecutionId": "wf-a1b2c3d4-5678-90ab-cdef-EXAMPLE44444", "type": "TEST",
                        "status": "RUNNING" if st == 2 else "COMPLETED", "totalStepCount": 4,
                        "startTime": at(46).isoformat(), "retried": False})
        return out

    def steps(self, wf: str) -> list[dict]:
        st = self.shown()
        iid = {"instanceId": self.instance}
        if wf.endswith("44444"):  # the test workflow, on a second instance
            tid = {"instanceId": "i-0fedcba9876543210"}
            return [_step(20, "LaunchTestInstance", "LaunchInstance", "COMPLETED", 46, 48, outputs=tid),
                    _step(21, "RunTestSuite", "RunCommand", "RUNNING" if st == 2 else "COMPLETED", 48,
                          None if st == 2 else 58, inputs=tid),
                    *([_step(22, "TerminateTestInstance", "TerminateInstance", "COMPLETED", 58, 60, inputs=tid)]
                      if st >= 3 else [])]
        steps = [_step(1, "LaunchBuildInstance", "LaunchInstance", "COMPLETED", 0, 2, {"waitFor": "ssmAgent"}, iid)]
        if st == 0:
            return steps + [_step(2, "ApplyBuildComponents", "ExecuteComponents", "RUNNING", 2, inputs=iid)]
        if self.fail:
            return steps + [_step(2, "ApplyBuildComponents", "ExecuteComponents", "FAILED", 2, 44, inputs=iid,
                                  message="Document arn:aws:imagebuilder:us-east-1:123456789012:component/"
                                          "inference-kit-vllm-sm75-build/1.0.1/1 failed!"),
                            _step(7, "TerminateBuildInstance", "TerminateInstance", "COMPLETED", 44, 45, inputs=iid)]
        return steps + [
            _step(2, "ApplyBuildComponents", "ExecuteComponents", "COMPLETED", 2, 38, inputs=iid),
            _step(3, "InventoryCollection", "CollectImageMetadata", "COMPLETED", 38, 39, inputs=iid),
            _step(4, "RunSanitizeScript", "SanitizeInstance", "COMPLETED", 39, 40),
            _step(5, "RunSysPrepScript", "RunSysPrep", "SKIPPED", 40, 40),
            _step(6, "CreateOutputAMI", "CreateImage", "COMPLETED", 40, 44, inputs=iid, outputs={"imageId": self.ami}),
            _step(7, "TerminateBuildInstance", "TerminateInstance", "COMPLETED", 44, 45, inputs=iid)]


class Account:
    """The Image Builder/EC2/Logs side of one account during ``harness.account.images build``."""

    def __init__(self, builds: dict[str, Build], pipelines: set[str] | None = None):
        self.builds = builds
        self.pipelines = set(builds) if pipelines is None else pipelines
        self.started: list[str] = []
        self.current: Build | None = None

    def imagebuilder(self, op: str, p: dict[str, Any]) -> Any:
        if op == "list_image_pipelines":
            names = p["filters"][0]["values"] if p.get("filters") else sorted(self.pipelines)
            return {"requestId": "a1b2c3d4-5678-90ab-cdef-EXAMPLE11111", "imagePipelineList": [
                {"arn": pipeline_arn(n), "name": n, "platform": "Linux", "enhancedImageMetadataEnabled": True,
                 "status": "ENABLED", "dateCreated": "2026-11-30T19:52:05.146Z", "tags": {}}
                for n in names if n in self.pipelines]}
        if op == "start_image_pipeline_execution":
            name = p["imagePipelineArn"].rsplit("/", 1)[1]
            self.current = self.builds[name]
            self.started.append(name)
            return {"requestId": "r", "clientToken": p["clientToken"], "imageBuildVersionArn": build_arn(name)}
        b = self.current
        if op == "get_image":
            assert p["imageBuildVersionArn"] == build_arn(b.name)
            out = {"requestId": "r", "image": b.image()}
            b.seen = b.stage()
            b.polls += 1
            return out
        if op == "list_workflow_executions":
            return {"requestId": "r", "workflowExecutions": b.workflows(), "imageBuildVersionArn": build_arn(b.name)}
        if op == "list_workflow_step_executions":
            return {"requestId": "r", "steps": b.steps(p["workflowExecutionId"]),
                    "workflowExecutionId": p["workflowExecutionId"], "imageBuildVersionArn": build_arn(b.name)}
        raise AssertionError(op)

    def ec2(self, op: str, p: dict[str, Any]) -> Any:
        assert op == "describe_instances", op
        b = self.current
        return {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "OwnerId": ACCOUNT, "Instances": [{
            "InstanceId": p["InstanceIds"][0], "InstanceType": b.instance_type,
            "State": {"Code": 16, "Name": "running"}}]}]}

    def logs(self, op: str, p: dict[str, Any]) -> Any:
        assert op == "get_log_events", op
        lines = ["Step BuildVllm: running pip wheel --no-build-isolation vllm==0.31.0",
                 "  error: subprocess-exited-with-error",
                 "  CMake Error at CMakeLists.txt:204: CUDA architecture 7.5 not in TORCH_CUDA_ARCH_LIST",
                 "Document arn:aws:imagebuilder:us-east-1:123456789012:component/inference-kit-vllm-sm75-build/1.0.1/1 failed!"]
        return {"events": [{"timestamp": 1764583200000 + i, "message": m, "ingestionTime": 1764583260000}
                           for i, m in enumerate(lines)],
                "nextForwardToken": "f/1", "nextBackwardToken": "b/1"}

    def clients(self) -> dict[str, Replay]:
        return {"imagebuilder": Replay("imagebuilder", self.imagebuilder), "ec2": Replay("ec2", self.ec2),
                "logs": Replay("logs", self.logs)}


__all__ = ["Account", "Build", "Error", "Replay", "at", "T0", "REGION", "ACCOUNT"]
