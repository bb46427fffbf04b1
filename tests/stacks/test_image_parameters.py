"""Image Builder can write and read the SSM parameters the image pipelines name.

The pipelines (stacks/images.py) set no ``ExecutionRole``, so Image Builder acts as its
service-linked role, AWSServiceRoleForImageBuilder, both when distribution writes the new AMI id
to a parameter (``ssm:PutParameter``; Image Builder User Guide, "Prerequisites for SSM output
parameters": "you must specify the ssm:PutParameter action in your Image Builder execution role,
with the parameter listed as a resource") and when a recipe's parent image is ``ssm:<name>``
(``ssm:GetParameter``). The SSM statements below are that role's policy as AWS publishes it
(AWS Managed Policy Reference, AWSServiceRoleForImageBuilder, policy version v25, edited
2026-02-12); every other statement of the policy names no ssm:*Parameter action.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from stacks import images

# (actions, resource patterns) of AWSServiceRoleForImageBuilder v25 that touch parameters.
SLR_PARAMETER_STATEMENTS = (
    ({"ssm:GetParameter", "ssm:PutParameter"}, ("arn:aws:ssm:*:*:parameter/imagebuilder/*",)),
    ({"ssm:GetParameter"}, ("arn:aws:ssm:*::parameter/aws/service/*",)),
)
ACCOUNT = "123456789012"


def parameter_arn(name: str, region: str) -> str:
    """A parameter's ARN as IAM matches it: public /aws/service parameters have no account."""
    account = "" if name.startswith("/aws/service/") else ACCOUNT
    return f"arn:aws:ssm:{region}:{account}:parameter{name}"


def slr_allows(action: str, name: str, region: str = "us-east-1") -> bool:
    arn = parameter_arn(name, region)
    return any(action in actions and any(fnmatchcase(arn, p) for p in patterns)
               for actions, patterns in SLR_PARAMETER_STATEMENTS)


def test_the_recorded_policy_reads_as_aws_documents_it():
    # The DLAMI parameters are readable, a parameter outside both prefixes is not.
    assert slr_allows("ssm:GetParameter", images.GPU_DLAMI.format(arch="arm64"))
    assert slr_allows("ssm:GetParameter", images.NEURON_DLAMI)
    assert not slr_allows("ssm:PutParameter", "/inference-kit/ami/neuron")  # the old name
    assert not slr_allows("ssm:GetParameter", "/inference-kit/ami/vllm-sm75-candidate")


def image_stacks(kit) -> list[str]:
    return [s for s in kit.templates if kit.resources(s, "AWS::ImageBuilder::ImagePipeline")]


def test_pipelines_run_as_the_service_linked_role(kit):
    for stack in image_stacks(kit):
        for p in kit.resources(stack, "AWS::ImageBuilder::ImagePipeline").values():
            assert "ExecutionRole" not in p["Properties"], "with an execution role, check its policy instead"


def test_every_published_parameter_is_writable_by_image_builder(kit):
    written = set()
    for stack in image_stacks(kit):
        for d in kit.resources(stack, "AWS::ImageBuilder::DistributionConfiguration").values():
            for dist in d["Properties"]["Distributions"]:
                for p in dist.get("SsmParameterConfigurations", []):
                    written.add(p["ParameterName"])
    # Every image's parameter but the Neuron lines not selected (-c neuron_sdk builds one at a time).
    other_lines = {images.IMAGE_PARAMETERS[i] for line, i in images.NEURON_IMAGES.items() if line != kit.config.neuron_sdk}
    assert written == (set(images.IMAGE_PARAMETERS.values()) - other_lines) | {images.SM75_CANDIDATE_PARAMETER}
    assert all(slr_allows("ssm:PutParameter", n) for n in images.IMAGE_PARAMETERS.values())
    refused = sorted(n for n in written if not slr_allows("ssm:PutParameter", n))
    assert not refused, f"AWSServiceRoleForImageBuilder cannot ssm:PutParameter {refused}"


def test_every_ssm_parent_image_is_readable_by_image_builder(kit):
    parents = set()
    for stack in image_stacks(kit):
        for r in kit.resources(stack, "AWS::ImageBuilder::ImageRecipe").values():
            parent = r["Properties"]["ParentImage"]
            if isinstance(parent, str) and parent.startswith("ssm:"):
                parents.add(parent.removeprefix("ssm:"))
    assert images.SM75_CANDIDATE_PARAMETER in parents
    refused = sorted(n for n in parents if not slr_allows("ssm:GetParameter", n))
    assert not refused, f"AWSServiceRoleForImageBuilder cannot ssm:GetParameter {refused}"
