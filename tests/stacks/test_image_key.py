"""The image stacks encrypt build and test volumes, and so every AMI snapshot, under a customer
managed KMS key (stacks/images.py ``ImagePipelineStack._volume_key``): an AMI under the AWS managed
``aws/ebs`` key cannot be shared with another account (EC2 User Guide, "Share an AMI with specific
AWS accounts"); one under a customer managed key can, with the key.

Facts the assertions stand on, each with its source in stacks/images.py: the recipe's
``kmsKeyId`` decides the key (without it an encrypted volume takes the account's default EBS key,
EBS User Guide "Amazon EBS encryption examples"); the default key policy's account root statement is
what lets Image Builder's service-linked role use the key through its own IAM policy; a key
pending deletion can't be used, so the key outlives the stack as the AMIs do.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from kit import image_facts
from tests.conftest import require_binary
from tests.stacks.conftest import ROOT, synth

IMAGE_STACKS = {"vllm-cuda": "VllmCudaImageStack", "vllm-sm75": "VllmSm75ImageStack", "neuron": "NeuronImageStack"}
GIVEN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def _own_key(kit, stack):
    (lid, key), = kit.resources(stack, "AWS::KMS::Key").items()
    return lid, key


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_each_image_stack_has_its_own_rotating_key_kept_with_its_amis(kit, image):
    stack = IMAGE_STACKS[image]
    lid, key = _own_key(kit, stack)
    props = key["Properties"]
    assert props["EnableKeyRotation"] is True
    # RETAIN on delete and on replacement: the AMIs outlive the stack, and a key pending deletion
    # would make them unlaunchable at once.
    assert key["DeletionPolicy"] == "Retain" and key["UpdateReplacePolicy"] == "Retain"
    assert "unusable once the key is deleted or pending deletion" in props["Description"]
    assert {t["Key"]: t["Value"] for t in props["Tags"]} == image_facts.key_tags(image)
    (alias,) = kit.resources(stack, "AWS::KMS::Alias").values()
    assert alias["Properties"] == {"AliasName": f"alias/inference-kit/{image}",
                                   "TargetKeyId": {"Fn::GetAtt": [lid, "Arn"]}}
    assert alias["Properties"]["AliasName"] == image_facts.key_alias(image)
    assert alias["DeletionPolicy"] == "Delete"  # a name: a redeploy after a destroy takes it again
    assert kit.templates[stack]["Outputs"][image_facts.KEY_OUTPUT]["Value"] == {"Fn::GetAtt": [lid, "Arn"]}


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_the_key_policy_is_the_account_root_statement_an_organizer_extends(kit, image):
    """Only the root statement: it makes IAM policies (the Image Builder service-linked role's own,
    an administrator's) and grants (harness.account.images share) work. Naming the service-linked role would
    fail in a fresh account, where Image Builder creates it only with the first image."""
    _, key = _own_key(kit, IMAGE_STACKS[image])
    (statement,) = key["Properties"]["KeyPolicy"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "kms:*" and statement["Resource"] == "*"
    assert statement["Principal"] == {"AWS": {"Fn::Join": ["", ["arn:aws:iam::", {"Ref": "AWS::AccountId"},
                                                                  ":root"]]}}
    assert "Condition" not in statement
    assert "AWSServiceRoleForImageBuilder" not in json.dumps(key)


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_every_recipe_volume_is_under_the_stacks_key(kit, image):
    stack = IMAGE_STACKS[image]
    lid, _ = _own_key(kit, stack)
    recipes = kit.resources(stack, "AWS::ImageBuilder::ImageRecipe")
    assert recipes
    for recipe in recipes.values():
        (bdm,) = recipe["Properties"]["BlockDeviceMappings"]
        assert bdm["Ebs"]["Encrypted"] is True and bdm["Ebs"]["KmsKeyId"] == {"Fn::GetAtt": [lid, "Arn"]}
    for dist in kit.resources(stack, "AWS::ImageBuilder::DistributionConfiguration").values():
        (d,) = dist["Properties"]["Distributions"]
        # One Region, the build's: the snapshots are already under the recipe's key; a distribution
        # key would be a re-encrypting copy of every build.
        assert "KmsKeyId" not in d["AmiDistributionConfiguration"] and d["Region"] == "us-east-1"


def test_the_promote_recipe_boots_the_candidate_under_the_same_key(kit):
    """vllm-sm75's gpu-test recipe starts from the build's candidate AMI, whose snapshots are under
    the stack's key: its own volume names that key too, so the promoted image stays shareable."""
    stack = "VllmSm75ImageStack"
    recipes = {r["Properties"]["Name"]: r["Properties"] for r in kit.resources(stack, "AWS::ImageBuilder::ImageRecipe").values()}
    build, promote = recipes["inference-kit-vllm-sm75-build"], recipes["inference-kit-vllm-sm75-gpu-test"]
    assert promote["ParentImage"] == f"ssm:{image_facts.SM75_CANDIDATE_PARAMETER}"
    assert promote["BlockDeviceMappings"][0]["Ebs"]["KmsKeyId"] == build["BlockDeviceMappings"][0]["Ebs"]["KmsKeyId"]


def test_the_project_tag_is_the_one_every_stack_carries():
    from stacks.wiring import KIT_TAGS

    assert KIT_TAGS[image_facts.PROJECT_TAG[0]] == image_facts.PROJECT_TAG[1]


@pytest.fixture(scope="module")
def given(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("given-key"), backends="g5g", image_kms_key=GIVEN)


def test_a_given_key_replaces_the_stacks_own(given):
    stack = "VllmSm75ImageStack"
    assert given.resources(stack, "AWS::KMS::Key") == {} and given.resources(stack, "AWS::KMS::Alias") == {}
    for recipe in given.resources(stack, "AWS::ImageBuilder::ImageRecipe").values():
        assert recipe["Properties"]["BlockDeviceMappings"][0]["Ebs"]["KmsKeyId"] == GIVEN
    assert given.templates[stack]["Outputs"][image_facts.KEY_OUTPUT]["Value"] == GIVEN


def test_another_key_is_another_recipe_version(given, tmp_path):
    """Image Builder recipe versions are immutable: a recipe whose volume key changed must carry a
    new version, or CloudFormation's replacement would collide with the version it replaces. The
    same configuration but the key, so nothing else can account for the difference."""
    def versions(k):
        return {r["Properties"]["Name"]: r["Properties"]["Version"]
                for r in k.resources("VllmSm75ImageStack", "AWS::ImageBuilder::ImageRecipe").values()}

    own, other = versions(synth(tmp_path, backends="g5g")), versions(given)
    assert own.keys() == other.keys() and all(own[n] != other[n] for n in own)
    assert versions(synth(tmp_path / "again", backends="g5g", image_kms_key=GIVEN)) == other  # and stable


def test_the_given_key_template_passes_cfn_lint(given):
    cfn_lint = require_binary(str(ROOT / ".venv/bin/cfn-lint"))
    path = given.outdir / "VllmSm75ImageStack.template.json"
    r = subprocess.run([cfn_lint, "--format", "parseable", "--regions", "us-east-1", str(path)],
                       capture_output=True, text=True)
    assert not r.returncode & 2, r.stdout + r.stderr
