"""What `cdk destroy` leaves behind (review R5): the log groups the services would create
themselves go with the stack instead.

Facts: Image Builder streams build logs to the group "/aws/imagebuilder/<ImageName>" (EC2 Image
Builder User Guide, "Amazon CloudWatch Logs integration"; the image name is the recipe's), and
SageMaker writes an endpoint's logs to "/aws/sagemaker/Endpoints/<EndpointName>" (the execution
role's EndpointLogs statement names the same group). A group the service creates has no retention
and is not the stack's, so `cdk destroy` would leave it. What stays anyway (AMIs, snapshots, the
published AMI parameters, which Image Builder creates) is listed in docs/stacks.md, "Teardown".
"""
from __future__ import annotations

IMAGE_STACKS = ("VllmCudaImageStack", "VllmSm75ImageStack", "NeuronImageStack")


def groups(kit, stack):
    return {r["Properties"]["LogGroupName"]: (k, r) for k, r in kit.resources(stack, "AWS::Logs::LogGroup").items()
            if isinstance(r["Properties"].get("LogGroupName"), str)}


def assert_goes_with_the_stack(resource):
    assert resource["DeletionPolicy"] == "Delete" and resource["UpdateReplacePolicy"] == "Delete"
    assert resource["Properties"]["RetentionInDays"] == 30


def test_each_pipelines_build_log_group_is_the_stacks(kit):
    for stack in IMAGE_STACKS:
        named = groups(kit, stack)
        recipes = {r["Properties"]["Name"] for r in kit.resources(stack, "AWS::ImageBuilder::ImageRecipe").values()}
        assert recipes
        for name in recipes:
            lid, group = named[f"/aws/imagebuilder/{name}"]
            assert_goes_with_the_stack(group)
        for p in kit.resources(stack, "AWS::ImageBuilder::ImagePipeline").values():
            wanted = named[f"/aws/imagebuilder/{p['Properties']['Name']}"][0]
            assert wanted in p.get("DependsOn", [])  # exists before any build writes to it


def test_each_endpoints_log_group_is_the_stacks_and_outlives_the_endpoint(kit):
    named = groups(kit, "SageMakerStack")
    for endpoint in kit.resources("SageMakerStack", "AWS::SageMaker::Endpoint").values():
        lid, group = named[f"/aws/sagemaker/Endpoints/{endpoint['Properties']['EndpointName']}"]
        assert_goes_with_the_stack(group)
        assert lid in endpoint["DependsOn"]  # created before, deleted after the endpoint
