"""harness images build tags an image built unpinned with the commit its build printed
(ami/components/vllm-cuda.yaml, ami/scripts/neuron-precompile.sh: "kit-model-revision MODEL SHA"),
so preflight can compare it with a pin (harness/account/preflight_weights.py)."""
from __future__ import annotations

import io

from harness.account.images import tag_baked_revision

SHA = "c" * 40
IMAGE = {"name": "inference-kit-neuron-build", "version": "1.0.123/1"}


class Ec2:
    def __init__(self, tags):
        self.tags, self.tagged = tags, []

    def describe_images(self, ImageIds):
        return {"Images": [{"ImageId": ImageIds[0], "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()]}]}

    def create_tags(self, Resources, Tags):
        self.tagged.append((Resources, Tags))


class Logs:
    def __init__(self, messages):
        self.messages, self.asked = messages, []

    def filter_log_events(self, **kw):
        self.asked.append(kw)
        return {"events": [{"message": m} for m in self.messages]}


def test_an_unpinned_build_is_tagged_with_the_commit_it_printed():
    ec2 = Ec2({"kit-model": "google/gemma-4-E2B-it", "kit-model-revision": "unpinned"})
    logs = Logs(["stdout: downloading", f"stdout: kit-model-revision google/gemma-4-E2B-it {SHA}"])
    out = io.StringIO()
    tag_baked_revision(ec2, logs, IMAGE, "ami-1", out)
    assert ec2.tagged == [(["ami-1"], [{"Key": "kit-model-revision", "Value": SHA}])]
    assert logs.asked[0]["logGroupName"] == "/aws/imagebuilder/inference-kit-neuron-build"
    assert logs.asked[0]["logStreamNames"] == ["1.0.123/1"]
    assert f"holds google/gemma-4-E2B-it at {SHA}" in out.getvalue()


def test_a_pinned_build_or_another_models_line_is_left_alone():
    ec2 = Ec2({"kit-model": "google/gemma-4-E2B-it", "kit-model-revision": SHA})
    tag_baked_revision(ec2, Logs([]), IMAGE, "ami-1", io.StringIO())
    assert ec2.tagged == []
    ec2 = Ec2({"kit-model": "google/gemma-4-E2B-it", "kit-model-revision": "unpinned"})
    out = io.StringIO()
    tag_baked_revision(ec2, Logs([f"kit-model-revision other/model {SHA}"]), IMAGE, "ami-1", out)
    assert ec2.tagged == [] and "names no commit" in out.getvalue()
