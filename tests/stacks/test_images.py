"""Image pipeline stacks (stacks/images.py) and how the g5g/inf2/trn1/g6 stacks read their images.

Uses the session-wide synthesis of the whole kit (tests/stacks/conftest.py: ``kit``), plus one
small extra synthesis for ``-c g6_image=prebuilt``. cdk-nag and cfn-lint over these templates
run in test_synth.py.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kit import pins
from kit.catalog import BACKENDS, instance_arch
from kit.image_facts import lifecycle_tags, pipeline_name
from stacks import images
from tests.stacks.conftest import EC2_STACKS, ROOT, config_error, synth, boot_parameter

IMAGE_STACKS = {"vllm-cuda": "VllmCudaImageStack", "vllm-sm75": "VllmSm75ImageStack", "neuron": "NeuronImageStack"}
COMPONENT_NAMES = {f.name: yaml.safe_load(f.read_text())["name"] for f in images.COMPONENTS_DIR.glob("*.yaml")}


def _by_name(kit, stack: str, type_: str) -> dict[str, dict]:
    return {v["Properties"]["Name"]: v["Properties"] for v in kit.resources(stack, type_).values()}


def _ref_id(value) -> str:
    """Logical id behind {"Fn::GetAtt": [id, ...]} or {"Ref": id}."""
    return value["Fn::GetAtt"][0] if "Fn::GetAtt" in value else value["Ref"]


def _recipe_components(kit, stack: str, recipe: dict) -> dict[str, dict[str, str]]:
    """Component document name -> {parameter: value} for one recipe."""
    res = kit.templates[stack]["Resources"]
    out = {}
    for c in recipe["Components"]:
        comp = res[_ref_id(c["ComponentArn"])]["Properties"]
        out[comp["Name"]] = {p["Name"]: p["Value"][0] for p in c.get("Parameters", [])}
    return out


def test_each_image_has_its_own_stack(kit):
    for stack in IMAGE_STACKS.values():
        assert stack in kit.templates
        assert kit.resources(stack, "AWS::ImageBuilder::ImagePipeline")


@pytest.mark.parametrize("image, parent, build_types, arch", [
    ("vllm-cuda", "ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
     ["g6.xlarge"], "x86_64"),
    ("vllm-sm75", "ssm:/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
     ["c7g.8xlarge", "c7g.16xlarge"], "arm64"),
    # SDK 2.28's DLAMI by its name, found in the account at deploy time (Custom::AmiByName)
    # built and tested on an inf2.8xlarge: an inf2.xlarge's chip with the host memory the compile needs
    ("neuron", "name:Deep Learning AMI Neuron (Ubuntu 24.04) 20260227", ["inf2.8xlarge"], "x86_64"),
])
def test_build_recipe_parent_and_build_host(kit, image, parent, build_types, arch):
    stack = IMAGE_STACKS[image]
    recipe = _by_name(kit, stack, "AWS::ImageBuilder::ImageRecipe")[f"inference-kit-{image}-build"]
    if parent.startswith("name:"):
        (lookup_id, lookup), = kit.resources(stack, "Custom::AmiByName").items()
        assert lookup["Properties"]["Name"] == parent.removeprefix("name:")
        assert recipe["ParentImage"] == {"Fn::GetAtt": [lookup_id, "ImageId"]}
    else:
        assert recipe["ParentImage"] == parent
    infra = _by_name(kit, stack, "AWS::ImageBuilder::InfrastructureConfiguration")[f"inference-kit-{image}-build"]
    assert infra["InstanceTypes"] == build_types
    assert {instance_arch(t) for t in infra["InstanceTypes"]} == {arch}


def test_sm75_compiles_without_a_gpu_and_is_promoted_on_a_g5g(kit):
    stack = IMAGE_STACKS["vllm-sm75"]
    infra = _by_name(kit, stack, "AWS::ImageBuilder::InfrastructureConfiguration")
    assert not any(t.startswith(("g", "p")) for t in infra["inference-kit-vllm-sm75-build"]["InstanceTypes"])
    assert infra["inference-kit-vllm-sm75-gpu-test"]["InstanceTypes"] == ["g5g.2xlarge"]
    recipes = _by_name(kit, stack, "AWS::ImageBuilder::ImageRecipe")
    assert recipes["inference-kit-vllm-sm75-gpu-test"]["ParentImage"] == "ssm:" + images.SM75_CANDIDATE_PARAMETER
    pipelines = _by_name(kit, stack, "AWS::ImageBuilder::ImagePipeline")
    # No GPU on the build host: its image tests would prove nothing; the g5g pipeline tests.
    assert pipelines["inference-kit-vllm-sm75-build"]["ImageTestsConfiguration"]["ImageTestsEnabled"] is False
    assert pipelines["inference-kit-vllm-sm75-gpu-test"]["ImageTestsConfiguration"]["ImageTestsEnabled"] is True
    # The candidate parameter exists before the promote recipe (seeded with the plain DLAMI).
    res = kit.templates[stack]["Resources"]
    seed_id, seed = kit.one(stack, "AWS::SSM::Parameter")
    assert seed["Properties"]["Name"] == images.SM75_CANDIDATE_PARAMETER
    assert seed["Properties"]["DataType"] == "aws:ec2:image"
    # Resolved once, not on every stack update (which would reset a built candidate).
    assert seed["Properties"]["Value"] == \
        "{{resolve:ssm:/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id}}"
    assert not kit.templates[stack].get("Parameters", {}).keys() - {"BootstrapVersion"}
    promote_id = next(k for k, v in res.items() if v["Type"] == "AWS::ImageBuilder::ImageRecipe"
                      and v["Properties"]["Name"].endswith("gpu-test"))
    assert seed_id in res[promote_id]["DependsOn"]


def test_components_attached_to_each_recipe_with_the_pinned_values(kit):
    sm75 = _by_name(kit, IMAGE_STACKS["vllm-sm75"], "AWS::ImageBuilder::ImageRecipe")
    build = _recipe_components(kit, IMAGE_STACKS["vllm-sm75"], sm75["inference-kit-vllm-sm75-build"])
    assert list(build) == ["inference-kit-vllm-sm75-python-uv", COMPONENT_NAMES["vllm-sm75-build.yaml"]]
    b = build[COMPONENT_NAMES["vllm-sm75-build.yaml"]]
    assert (b["TorchVersion"], b["VllmVersion"], b["ArchList"], b["PatchFile"]) == \
        (pins.TORCH_VERSION, pins.VLLM_VERSION, "7.5", pins.SM75_PATCH)
    assert b["VllmSdistSha256"] == pins.VLLM_SDIST_SHA256
    assert (ROOT / "ami" / "patches" / b["PatchFile"]).is_file()
    promote = _recipe_components(kit, IMAGE_STACKS["vllm-sm75"], sm75["inference-kit-vllm-sm75-gpu-test"])
    assert promote == {COMPONENT_NAMES["vllm-sm75-gpu-test.yaml"]: {
        "Model": kit.config.backend("g5g").model_id, "ModelRevision": "none",  # unpinned (kit/weights.py)
        "HfTokenSecret": kit.config.hf_token_secret}}

    cuda = _by_name(kit, IMAGE_STACKS["vllm-cuda"], "AWS::ImageBuilder::ImageRecipe")["inference-kit-vllm-cuda-build"]
    c = _recipe_components(kit, IMAGE_STACKS["vllm-cuda"], cuda)[COMPONENT_NAMES["vllm-cuda.yaml"]]
    assert c["VllmVersion"] == pins.VLLM_VERSION
    assert c["PrePullModel"] == kit.config.backend("g6").model_id  # g6 serves minutes after boot

    neuron = _by_name(kit, IMAGE_STACKS["neuron"], "AWS::ImageBuilder::ImageRecipe")["inference-kit-neuron-build"]
    n = _recipe_components(kit, IMAGE_STACKS["neuron"], neuron)[COMPONENT_NAMES["neuron-engine.yaml"]]
    # The 2.28.1 release content (aws-neuron-sdk v2.31.1, src/helperscripts/n2-manifest.json).
    assert n["NeuronSdk"] == "2.28.1"
    assert "torch-neuronx==2.9.0.2.12.22436" in n["NeuronPip"].split()
    assert "neuronx-cc==2.23.6484.0" in n["NeuronPip"].split()
    assert "neuronx-distributed-inference==0.8.16251" in n["NeuronPip"].split()
    assert "aws-neuronx-runtime-lib=2.30.51.0*" in n["NeuronApt"].split()
    # The 2.28.1 driver (the Linux 6.18 fix; the 20260227 DLAMI has 2.28.0's 2.26.5.0), held with the kernel.
    assert "aws-neuronx-dkms=2.26.10.0*" in n["NeuronApt"].split()
    assert n["KernelHold"] == "linux-*aws*"
    assert "transformers==4.57.6" in n["EnginePip"].split()
    assert n["NeuronToolsBin"] == "/opt/aws/neuron/bin"
    assert all("==" in s for s in n["EnginePip"].split()) and "aiohttp==" in n["EnginePip"]


def test_component_data_is_the_document_file_and_versions_follow_content(kit):
    names = []
    for image, stack in IMAGE_STACKS.items():
        for comp in kit.resources(stack, "AWS::ImageBuilder::Component").values():
            p = comp["Properties"]
            names.append(p["Name"])
            file = next(f for f, name in COMPONENT_NAMES.items() if images.component_name(image, name) == p["Name"])
            text = (images.COMPONENTS_DIR / file).read_text()
            assert p["Data"] == text and p["Platform"] == "Linux"
            assert p["Version"] == images.semantic_version(text)
    # Component names are unique per account and region: the shared python-uv document too.
    assert len(names) == len(set(names)) and sum("python-uv" in n for n in names) == 3
    assert images.semantic_version("a") != images.semantic_version("b")


def test_assets_reach_the_build_host_and_only_them(kit):
    stack = IMAGE_STACKS["neuron"]
    s3_uri = _recipe_components(kit, stack, _by_name(kit, stack, "AWS::ImageBuilder::ImageRecipe")[
        "inference-kit-neuron-build"])[COMPONENT_NAMES["neuron-engine.yaml"]]["AssetsS3Uri"]
    # s3://cdk-…-assets-${AWS::AccountId}-<region>/<hash>.zip (an Fn::Sub until deploy time)
    (asset_hash,) = re.findall(r"s3://cdk-[^/]+/([0-9a-f]{64})\.zip", json.dumps(s3_uri))
    asset_dir = Path(kit.outdir) / f"asset.{asset_hash}"
    shipped = {p.relative_to(asset_dir).parts[0] for p in asset_dir.rglob("*") if p.is_file()}
    assert shipped == {"neuron", "neuron-port", "scripts"}
    assert (asset_dir / "neuron" / "server.py").is_file() and not list(asset_dir.rglob("__pycache__"))


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_build_infrastructure_is_locked_down(kit, image):
    stack = IMAGE_STACKS[image]
    res = kit.templates[stack]["Resources"]
    for infra in kit.resources(stack, "AWS::ImageBuilder::InfrastructureConfiguration").values():
        p = infra["Properties"]
        assert p["InstanceMetadataOptions"]["HttpTokens"] == "required"  # IMDSv2
        assert p["TerminateInstanceOnFailure"] is True
        (sg_ref,) = p["SecurityGroupIds"]
        sg = res[_ref_id(sg_ref)]["Properties"]
        assert "SecurityGroupIngress" not in sg
        assert {(e["FromPort"], e["CidrIp"]) for e in sg["SecurityGroupEgress"]} == {(443, "0.0.0.0/0"), (80, "0.0.0.0/0")}
        assert res[_ref_id(p["SubnetId"])]["Properties"]["MapPublicIpOnLaunch"] is True  # no NAT in the VPC
    assert not [r for r in res.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    for recipe in kit.resources(stack, "AWS::ImageBuilder::ImageRecipe").values():
        (bdm,) = recipe["Properties"]["BlockDeviceMappings"]
        assert bdm["Ebs"]["Encrypted"] is True and bdm["Ebs"]["VolumeType"] == "gp3"


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_build_role_is_least_privilege(kit, image):
    stack = IMAGE_STACKS[image]
    roles = kit.resources(stack, "AWS::IAM::Role")
    role = next(v for k, v in roles.items() if k.startswith("InstanceRole"))
    (lifecycle,) = [v for k, v in roles.items() if k.startswith("LifecycleRole")]
    assert lifecycle["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "imagebuilder.amazonaws.com"}
    assert "service-role/EC2ImageBuilderLifecycleExecutionPolicy" in json.dumps(lifecycle["Properties"]["ManagedPolicyArns"])
    # Besides these two, only the AZ chooser's (tests/stacks/test_az_choice.py) and, for a parent
    # found by name, its lookup's (DescribeImages only).
    lookups = {k: v for k, v in roles.items() if k.startswith("BuildParentLookupRole")}
    assert len(roles) == 3 + len(lookups) and sum(k.startswith("AzChoiceRole") for k in roles) == 1
    assert len(lookups) == (1 if image in images.PARENT_AMI_NAMES else 0)
    for k in lookups:
        pols = [v for v in kit.resources(stack, "AWS::IAM::Policy").values()
                if json.dumps(v["Properties"]["Roles"]).find(k) >= 0]
        actions = {a for pol in pols for st in pol["Properties"]["PolicyDocument"]["Statement"]
                   for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
        assert actions == {"ec2:DescribeImages", "logs:CreateLogStream", "logs:PutLogEvents"}
    managed = {json.dumps(m) for m in role["Properties"]["ManagedPolicyArns"]}
    assert len(managed) == 2 and all("EC2InstanceProfileForImageBuilder" in m or "AmazonSSMManagedInstanceCore" in m
                                     for m in managed)
    role_id = next(k for k in roles if k.startswith("InstanceRole"))
    (policy,) = [p for p in kit.resources(stack, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    actions = sorted(a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    assert actions == ["s3:GetObject", "secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    s3 = next(s for s in statements if s["Action"] == "s3:GetObject")
    assert json.dumps(s3["Resource"]).count("*") == 0  # one object, no wildcard


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_pipelines_publish_to_ssm_and_never_run_on_a_schedule(kit, image):
    stack = IMAGE_STACKS[image]
    published = set()
    for d in kit.resources(stack, "AWS::ImageBuilder::DistributionConfiguration").values():
        (dist,) = d["Properties"]["Distributions"]
        (param,) = dist["SsmParameterConfigurations"]
        assert param["DataType"] == "aws:ec2:image"
        published.add(param["ParameterName"])
        assert "{{ imagebuilder:buildDate }}" in dist["AmiDistributionConfiguration"]["Name"]
    assert images.IMAGE_PARAMETERS[image] in published
    for p in kit.resources(stack, "AWS::ImageBuilder::ImagePipeline").values():
        assert "Schedule" not in p["Properties"] and p["Properties"]["Status"] == "ENABLED"


# What a backend of each image family (catalog ``Backend.image``) boots by default, and that image's
# architecture: the public GPU DLAMI (x86_64), the kit's sm_75 image (arm64: g5g's Graviton), the
# kit's Neuron image of the default SDK line.
FAMILY_BOOTS = {
    "gpu-x86": ("/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
                "x86_64"),
    "gpu-arm64": ("/imagebuilder/inference-kit/ami/vllm-sm75", "arm64"),
    "neuron": ("/imagebuilder/inference-kit/ami/neuron-sdk228", "x86_64"),
}


@pytest.mark.parametrize("backend, stack", sorted(EC2_STACKS.items()))
def test_backend_stacks_read_the_image_parameter(kit, backend, stack):
    parameter, arch = FAMILY_BOOTS[BACKENDS[backend].image]
    assert boot_parameter(kit.templates[stack]) == parameter
    # The instance boots an image of its own architecture (arm64 for g5g).
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    image = images.FAMILY_IMAGE[BACKENDS[backend].image]
    spec = images.image_specs(kit.config)[image]
    assert instance_arch(instance["Properties"]["InstanceType"]) == spec.arch == arch


def test_backend_user_data_for_custom_silicon(kit):
    g5g = kit.stacks["G5gStack"].server.user_data_text
    assert "--attention-backend TRITON_ATTN --dtype float16" in g5g
    assert "--tool-call-parser gemma4" in g5g
    for stack in ("Inf2Stack", "Trn1Stack"):
        text = kit.stacks[stack].server.user_data_text
        # inf2.xlarge and trn1.2xlarge: 2 NeuronCores, the runtime's degrees up to 2 (kit/catalog.py)
        assert "KIT_TP_DEGREES=1,2\n" in text
        assert f"KIT_NEURON_PLATFORM={stack[:4].lower()}\n" in text


def test_trn1n_runs_as_trn1_with_trn1s_degrees(tmp_path):
    s = synth(tmp_path, backends="trn1", trn1_instance_type="trn1n.32xlarge")
    text = s.stacks["Trn1Stack"].server.user_data_text
    assert "KIT_TP_DEGREES=1,2,8,16,32\n" in text and "KIT_NEURON_PLATFORM=trn1\n" in text


def test_g6_prebuilt_image_neuron_parent_override_and_backend_selection(tmp_path):
    s = synth(tmp_path, backends="g6,inf2", g6_image="prebuilt", neuron_parent_image="ami-0123456789abcdef0")
    assert "VllmCudaImageStack" in s.templates and "NeuronImageStack" in s.templates
    recipes = {v["Properties"]["Name"]: v["Properties"]
               for v in s.resources("NeuronImageStack", "AWS::ImageBuilder::ImageRecipe").values()}
    assert recipes["inference-kit-neuron-build"]["ParentImage"] == "ami-0123456789abcdef0"
    assert "VllmSm75ImageStack" not in s.templates  # no g5g selected: no sm_75 pipelines
    assert boot_parameter(s.templates["G6Stack"]) == "/imagebuilder/inference-kit/ami/vllm-cuda"


def test_neuron_sdk_231_is_a_separate_image_and_parameter_and_228_stays_the_default(kit, tmp_path):
    from aws_cdk.assertions import Match

    default = kit.template("NeuronImageStack")
    default.has_resource_properties("AWS::ImageBuilder::DistributionConfiguration", Match.object_like({
        "Distributions": [Match.object_like({"SsmParameterConfigurations": [
            {"ParameterName": "/imagebuilder/inference-kit/ami/neuron-sdk228", "DataType": "aws:ec2:image"}]})]}))
    default.has_resource_properties("AWS::ImageBuilder::ImagePipeline", {"Name": "inference-kit-neuron-build"})
    assert "NeuronSdk231ImageStack" not in kit.templates
    s = synth(tmp_path, backends="inf2,trn1", neuron_sdk="2.31")
    assert "NeuronImageStack" not in s.templates
    other = s.template("NeuronSdk231ImageStack")
    other.has_resource_properties("AWS::ImageBuilder::DistributionConfiguration", Match.object_like({
        "Distributions": [Match.object_like({"SsmParameterConfigurations": [
            {"ParameterName": "/imagebuilder/inference-kit/ami/neuron-sdk231", "DataType": "aws:ec2:image"}]})]}))
    other.has_resource_properties("AWS::ImageBuilder::ImagePipeline", {"Name": "inference-kit-neuron-sdk231-build"})
    other.has_resource_properties("AWS::ImageBuilder::ImageRecipe", Match.object_like({
        "ParentImage": "ssm:/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"}))
    other.resource_count_is("Custom::AmiByName", 0)
    for name in ("Inf2Stack", "Trn1Stack"):
        assert boot_parameter(s.templates[name]) == "/imagebuilder/inference-kit/ami/neuron-sdk231"
    # The 2.31 pins reach its component; the default's stay 2.28.
    comp = {c["Name"]: c for c in (r["Properties"] for r in s.resources("NeuronSdk231ImageStack", "AWS::ImageBuilder::ImageRecipe").values())}
    params = {p["Name"]: p["Value"][0] for c in comp["inference-kit-neuron-sdk231-build"]["Components"]
              for p in c.get("Parameters", [])}
    assert params["NeuronSdk"] == "2.31.0" and "neuronx-distributed-inference==0.10.18399" in params["NeuronPip"]
    # Both image stacks can live in one VPC: their build subnets are different blocks.
    bases = {json.dumps(kit.resources("NeuronImageStack", "Custom::AzChoice")), json.dumps(s.resources("NeuronSdk231ImageStack", "Custom::AzChoice"))}
    cidrs = [next(iter(json.loads(b).values()))["Properties"]["CidrBase"] for b in bases]
    assert len(set(cidrs)) == 2


def test_an_unknown_neuron_sdk_line_is_refused_in_one_line():
    msg = config_error(neuron_sdk="2.30")
    assert msg.startswith("neuron_sdk='2.30' is not a Neuron SDK line the kit builds; valid: 2.28 (") and "2.31 (" in msg


def test_x86_instance_type_for_g5g_fails_synth_in_one_line(tmp_path):
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true", "AWS_EC2_METADATA_DISABLED": "true",
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    r = subprocess.run(["npx", "cdk", "synth", "-q", "-o", str(tmp_path / "out"), "-c", "backends=g5g",
                        "-c", "g5g_instance_type=g6.xlarge"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("config error:")]
    assert errors == ["config error: g5g_instance_type='g6.xlarge' is x86_64 but the g5g image is arm64; "
                      "use a arm64 type such as g5g.2xlarge"]
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize("image", list(IMAGE_STACKS))
def test_old_builds_are_deleted_by_a_lifecycle_policy(kit, image):
    stack = IMAGE_STACKS[image]
    pipelines = _by_name(kit, stack, "AWS::ImageBuilder::ImagePipeline")
    policies = _by_name(kit, stack, "AWS::ImageBuilder::LifecyclePolicy")
    assert set(policies) == set(pipelines)
    # The one function harness.account.images also passes to StartImagePipelineExecution (a manual build
    # takes that request's tags, not the pipeline's: kit/image_facts.py lifecycle_tags).
    tags_by_name = {pipeline_name(image, key): lifecycle_tags(image, key) for key in ("build", "gpu-test")}
    for name, pipeline in pipelines.items():
        assert pipeline["ImageTags"] == tags_by_name[name]
        policy = policies[name]
        assert policy["ResourceType"] == "AMI_IMAGE" and policy["Status"] == "ENABLED"
        assert policy["ResourceSelection"] == {"TagMap": tags_by_name[name]}
        (detail,) = policy["PolicyDetails"]
        assert detail["Action"] == {"Type": "DELETE", "IncludeResources": {"Amis": True, "Snapshots": True}}
        assert detail["Filter"] == {"Type": "COUNT", "Value": images.LIFECYCLE_KEEP_IMAGES}
        assert detail["ExclusionRules"]["Amis"]["LastLaunched"] == {
            "Unit": "DAYS", "Value": images.LIFECYCLE_KEEP_LAUNCHED_DAYS}
    assert len({p["ImageTags"]["kit-lifecycle"] for p in pipelines.values()}) == len(pipelines)


def test_image_root_volume_fits_the_backend_root_volume(kit):
    """An instance's root volume cannot be smaller than its AMI's snapshot."""
    from kit.image_families import IMAGE_FAMILIES

    for family, image in images.FAMILY_IMAGE.items():
        stack = IMAGE_STACKS[image]
        for recipe in kit.resources(stack, "AWS::ImageBuilder::ImageRecipe").values():
            size = recipe["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
            assert size <= IMAGE_FAMILIES[family].root_volume_gib, (family, size)


def test_build_subnets_do_not_overlap_the_kit_vpc_subnets(kit):
    """Every /24 an AZ chooser may hand out (its block of 8, one per AZ letter; the AZ is known
    only at deploy time) lies in the VPC, off NetworkStack's subnets and off every other block."""
    import ipaddress

    from stacks.az_choice import CIDR_PREFIX
    from kit.az_choice import MAX_LETTERS

    vpc = [ipaddress.ip_network(v["Properties"]["CidrBlock"])
           for v in kit.resources("NetworkStack", "AWS::EC2::VPC").values()]
    network = [ipaddress.ip_network(v["Properties"]["CidrBlock"])
               for v in kit.resources("NetworkStack", "AWS::EC2::Subnet").values()]
    blocks = {}
    for stack in kit.templates:
        for lid, c in kit.resources(stack, "Custom::AzChoice").items():
            base = int(c["Properties"]["CidrBase"])
            assert c["Properties"]["CidrPrefix"] == CIDR_PREFIX
            blocks[f"{stack}/{lid}"] = [ipaddress.ip_network(f"{CIDR_PREFIX}.{base + i}.0/24") for i in range(MAX_LETTERS)]
    assert sum(k.startswith(tuple(IMAGE_STACKS.values())) for k in blocks) == 3
    for name, cidrs in blocks.items():
        assert all(any(c.subnet_of(v) for v in vpc) for c in cidrs), name
        assert not any(a.overlaps(b) for a in cidrs for b in network), name
        others = [c for n, cs in blocks.items() if n != name for c in cs]
        assert not any(a.overlaps(b) for a in cidrs for b in others), name
