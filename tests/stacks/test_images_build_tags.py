"""``python -m harness images build`` starts each pipeline with the tags its lifecycle policy
selects builds by: a build started by hand takes its image resource's tags from the
StartImagePipelineExecution request, not from the pipeline (botocore imagebuilder 2019-12-02
service-2.json, ImagePipeline imageTags), so a build without them is never deleted.

The expected tags are read from the synthesized image stacks (the session's one synthesis,
tests/stacks/conftest.py ``kit``), and botocore's Stubber compares them with the request the
command sends (``expected_params``), after validating it against the service model."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

from harness.account import images
from kit.image_facts import BUILD_HOSTS, IMAGE_STACKS
from tests.harness.imagebuilder_recorded import Account, Build, Replay, pipeline_arn

EMPTY_CDK_JSON = str(Path(__file__).resolve().parents[1] / "harness" / "fixtures" / "empty-cdk.json")
START = "start_image_pipeline_execution"


class ExpectingStart(Replay):
    """Image Builder whose StartImagePipelineExecution answer is queued with the request the
    template implies: the pipeline's ARN and its lifecycle policy's TagMap (any client token)."""

    def __init__(self, handler, expected: dict[str, dict[str, str]]):
        super().__init__("imagebuilder", handler)
        self.expected = expected  # pipeline ARN -> tags

    def __getattr__(self, name: str) -> Any:
        if name != START:
            return super().__getattr__(name)
        method = getattr(self.client, name)

        def call(**params: Any) -> Any:
            self.calls.append((name, params))
            arn = params.get("imagePipelineArn")
            self.stubber.add_response(name, self.handler(name, params), expected_params={
                "imagePipelineArn": arn, "clientToken": ANY, "tags": self.expected[arn]})
            return method(**params)
        return call


def _lifecycle_tag_maps(kit, stack: str) -> dict[str, dict[str, str]]:
    """Pipeline name -> the TagMap of the lifecycle policy of the same name (stacks/images.py
    names a pipeline and its policy alike, kit/image_facts.py pipeline_name)."""
    pipelines = {r["Properties"]["Name"] for r in kit.resources(stack, "AWS::ImageBuilder::ImagePipeline").values()}
    policies = {r["Properties"]["Name"]: r["Properties"]["ResourceSelection"]["TagMap"]
                for r in kit.resources(stack, "AWS::ImageBuilder::LifecyclePolicy").values()}
    assert pipelines and pipelines == set(policies), (stack, pipelines, sorted(policies))
    return policies


@pytest.mark.parametrize("image", [i for i in IMAGE_STACKS if i in ("vllm-cuda", "vllm-sm75", "neuron")])
def test_a_started_build_carries_its_lifecycle_policys_selection_tags(kit, image):
    stack = IMAGE_STACKS[image]
    if stack not in kit.templates:
        pytest.skip(f"{stack} is not in the default synthesis")
    tag_maps = _lifecycle_tag_maps(kit, stack)
    builds = {name: Build(name) for name in tag_maps}
    acct = Account(builds)
    clients = acct.clients()
    clients["imagebuilder"] = ExpectingStart(acct.imagebuilder, {pipeline_arn(n): t for n, t in tag_maps.items()})
    aws = images.Aws(client=lambda service, region: clients[service], price=lambda t, r: None, sleep=lambda s: None)
    out = io.StringIO()
    rc = images.main(["build", image, "--region", "us-east-1", "--no-deploy", "--cdk-json", EMPTY_CDK_JSON],
                     aws=aws, out=out)
    assert rc == 0, out.getvalue()
    started = [p for op, p in clients["imagebuilder"].calls if op == START]
    assert [p["imagePipelineArn"] for p in started] == [pipeline_arn(n) for n in acct.started]
    assert set(acct.started) == set(tag_maps) and len(started) == len(BUILD_HOSTS[image])
    assert [p["tags"] for p in started] == [tag_maps[n] for n in acct.started]
    clients["imagebuilder"].stubber.assert_no_pending_responses()
