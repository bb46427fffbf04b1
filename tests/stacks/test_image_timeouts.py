"""Image Builder timeouts for the kit's multi-hour builds (review R5).

Facts, with their sources:
- AWSTOE step ``timeoutSeconds``: "Number of seconds that the step runs before failing or
  retrying. Also, supports -1 value, which indicates infinite timeout. 0 and other negative values
  are not allowed." Default 7,200 s (120 min); no maximum is documented (EC2 Image Builder User
  Guide, toe-use-documents.md, awsdocs/ec2-image-builder-user-guide 9fbda32).
- The pipelines set no ``Workflows``, so Image Builder runs its managed build and test workflows,
  whose ``ExecuteComponents`` step runs the recipe's components (build stage: their build and
  validate phases; test stage: their test phases) with a "Default Timeout: 720 minutes" (User
  Guide, "Supported step actions for your workflow document", ExecuteComponents). A step's own
  timeout above what is left of those 720 minutes never fires: the workflow step times out first,
  with no step name in its message.
- The pipeline's ``ImageTestsConfiguration.TimeoutMinutes`` bounds nothing: "The timeout property
  is not currently active. This value is ignored." (Image Builder API Reference,
  ImageTestsConfiguration; valid range 60-1440).
So per recipe: the step timeouts of the build and validate phases (explicit, else AWSTOE's
default) sum to at most 720 min, and so do those of the test phases.
"""
from __future__ import annotations

import pytest
import yaml

AWSTOE_DEFAULT_TIMEOUT_S = 7200
EXECUTE_COMPONENTS_TIMEOUT_S = 720 * 60
IMAGE_STACKS = ("VllmCudaImageStack", "VllmSm75ImageStack", "NeuronImageStack")


def step_timeouts(doc: dict, phases: set[str]) -> list[tuple[str, int]]:
    return [(s["name"], s.get("timeoutSeconds", AWSTOE_DEFAULT_TIMEOUT_S))
            for p in doc["phases"] if p["name"] in phases for s in p["steps"]]


def pipelines(kit, stack):
    components = {k: yaml.safe_load(r["Properties"]["Data"])
                  for k, r in kit.resources(stack, "AWS::ImageBuilder::Component").items()}
    recipes = kit.resources(stack, "AWS::ImageBuilder::ImageRecipe")
    for key, p in kit.resources(stack, "AWS::ImageBuilder::ImagePipeline").items():
        assert "Workflows" not in p["Properties"]  # the managed workflows, whose timeouts are recorded above
        recipe = recipes[p["Properties"]["ImageRecipeArn"]["Fn::GetAtt"][0]]
        docs = [components[c["ComponentArn"]["Fn::GetAtt"][0]] for c in recipe["Properties"]["Components"]]
        yield key, p["Properties"], docs


@pytest.mark.parametrize("stack", IMAGE_STACKS)
def test_every_step_timeout_can_fire_before_the_workflows(kit, stack):
    for key, props, docs in pipelines(kit, stack):
        build = [t for d in docs for t in step_timeouts(d, {"build", "validate"})]
        assert all(s > 0 for _, s in build), build  # no -1 (infinite): the workflow would end it anyway
        assert sum(s for _, s in build) <= EXECUTE_COMPONENTS_TIMEOUT_S, (key, build)
        tests = [t for d in docs for t in step_timeouts(d, {"test"})]
        assert 60 <= props["ImageTestsConfiguration"]["TimeoutMinutes"] <= 1440  # accepted, then ignored
        assert sum(s for _, s in tests) <= EXECUTE_COMPONENTS_TIMEOUT_S, (key, tests)


def test_the_sm75_compile_steps_keep_room_for_the_estimates(kit):
    """docs/images.md estimates PyTorch ~2 h and vLLM ~1 h on c7g.8xlarge: each step allows >= 2.5x."""
    (build,) = [docs for key, _, docs in pipelines(kit, "VllmSm75ImageStack") if key.startswith("Build")]
    timeouts = dict(t for d in build for t in step_timeouts(d, {"build"}))
    assert timeouts["BuildTorch"] >= 2.5 * 2 * 3600 and timeouts["BuildVllm"] >= 2.5 * 3600
