"""cdk.json context validation: every bad value is one line naming the value and the valid choices."""
from __future__ import annotations

import pytest

from kit.catalog import BACKEND_IDS, BACKENDS
from kit.config import parse
from tests.stacks.conftest import config_error


def test_defaults_select_every_backend():
    c = parse({})
    assert c.backend_ids == BACKEND_IDS
    assert c.backend("g6").instance_type == "g6.xlarge"
    assert c.backend("sagemaker").instance_types == ("ml.g6.xlarge",)
    assert (c.idle_stop_minutes, c.ttl_hours, c.azs) == (60, 8.0, ())


def test_unknown_backend_names_it_and_the_valid_ids():
    msg = config_error(backends="g6,nope")
    assert "'nope'" in msg and ", ".join(BACKEND_IDS) in msg


@pytest.mark.parametrize("key,value,want", [
    ("g5g_instance_type", "g6.xlarge", "is x86_64 but the g5g image is arm64"),
    ("g6_instance_type", "g5g.xlarge", "is arm64 but the g6 image is x86_64"),
    ("inf2_instance_type", "g6.xlarge", "needs an inf2/trn1 type"),
    ("g6_instance_type", "ml.g6.xlarge", "needs an EC2 type without ml."),
    ("sagemaker_instance_type", "g6.xlarge", "needs an ml.* SageMaker type"),
    ("g6_instance_type", "banana", "is not an instance type"),
])
def test_instance_type_mismatch(key, value, want):
    msg = config_error(**{key: value})
    assert repr(value) in msg and want in msg


@pytest.mark.parametrize("key,value", [
    ("idle_stop_minutes", "abc"), ("idle_stop_minutes", -5), ("idle_stop_minutes", True),
    ("ttl_hours", "8h"), ("ttl_hours", 10000), ("max_model_len", 16), ("max_model_len", "4k"),
])
def test_malformed_numbers(key, value):
    msg = config_error(**{key: value})
    assert key in msg and repr(value) in msg and "valid:" in msg


@pytest.mark.parametrize("context,want", [
    ({"region": "mars-1"}, "not an AWS region code"),
    ({"hf_token_secret": "has space"}, "not a Secrets Manager secret name"),
    ({"backends": "g6,,inf2"}, "empty item"),
    ({"azs": "us-west-2a"}, "'us-west-2a' is not an Availability Zone of us-east-1"),
    ({"azs": "us-east-1a,us-east-1a"}, "twice"),
    ({"g6_az": "us-east-2b"}, "g6_az='us-east-2b' is not an Availability Zone of us-east-1, where g6 deploys"),
    ({"g5g_region": "us-west-2", "g5g_az": "us-east-1b"}, "is not an Availability Zone of us-west-2"),
    ({"image_az": "us-east-1z"}, "image_az='us-east-1z' is not an Availability Zone of us-east-1"),
    ({"sagemaker_instance_types": "ml.g6.xlarge,g6.xlarge"}, "needs an ml.* SageMaker type"),
    ({"tags": {"cost center": "x"}}, "key 'cost center' is not allowed"),
    ({"tags": {"team/a": "x"}}, "no spaces or /"),
])
def test_other_bad_values(context, want):
    assert want in config_error(**context)


def test_numbers_from_the_command_line_are_strings():
    c = parse({"idle_stop_minutes": "15", "ttl_hours": "2.5", "backends": "g6"})
    assert (c.idle_stop_minutes, c.ttl_hours, c.backend_ids) == (15, 2.5, ("g6",))


def test_azs_and_per_backend_az():
    c = parse({"azs": "us-east-1a,us-east-1d", "trn1_az": "us-east-1d", "backends": "trn1,g6"})
    assert c.azs == ("us-east-1a", "us-east-1d")
    assert c.backend("trn1").az == "us-east-1d" and c.backend("g6").az is None
    # A backend's AZ is a preference of its own subnet (stacks/az_choice.py), not one of the VPC's.
    assert parse({"trn1_az": "us-east-1f", "backends": "trn1"}).backend("trn1").az == "us-east-1f"


def test_a_mistyped_key_is_refused_not_ignored():
    # `-c backend=g6` would otherwise synthesize every backend; `ttl_hour` would keep 8 h.
    assert config_error(backend="g6") == "unknown context key 'backend'; did you mean 'backends'?"
    assert "'ttl_hours'" in config_error(ttl_hour="1")
    # CDK's own keys (feature flags, lookups, CLI settings) are not the kit's business.
    parse({"@aws-cdk/core:checkSecretUsage": True, "cli-telemetry": False,
           "availability-zones:account=1:region=us-east-1": ["us-east-1a"], "aws:cdk:enable-path-metadata": True})


def test_sagemaker_ami_version_must_look_like_one():
    assert "'al2-gpu'" in config_error(sagemaker_ami_version="al2-gpu")
    assert parse({"sagemaker_ami_version": "al2-ami-sagemaker-inference-gpu-3-1"}).sagemaker_ami_version
    assert parse({"sagemaker_ami_version": ""}).sagemaker_ami_version == ""


def test_unknown_neuron_size_is_refused_at_parse_in_one_line():
    msg = config_error(backends="inf2", inf2_instance_type="inf2.2xlarge")
    assert msg.startswith("inf2_instance_type='inf2.2xlarge': the catalog (kit/catalog.py) has no NeuronCore count")
    assert "known: inf2.xlarge" in msg
    assert parse({"backends": "trn1", "trn1_instance_type": "trn1n.32xlarge"}).backend("trn1").instance_type \
        == "trn1n.32xlarge"


def test_model_applies_to_open_weights_backends_only():
    c = parse({"model": "org/m-7b", "inf2_model": "org/other", "bedrock_model": "amazon.nova-lite-v1:0"})
    models = {b.id: b.model_id for b in c.backends}
    # every catalog row: -c model for the open-weights ones, inf2's own key for inf2, Bedrock's for it
    assert models == {b.id: "org/other" if b.id == "inf2" else "org/m-7b" if b.open_weights
                      else "amazon.nova-lite-v1:0" for b in BACKENDS.values()}
    assert models["bedrock"] == "amazon.nova-lite-v1:0" and models["g6"] == "org/m-7b"
    assert parse({"model": "org/m-7b"}).backend("bedrock").model_id == "us.amazon.nova-micro-v1:0"


def test_boot_image_choice():
    assert parse({}).backend("g6").image_choice == "dlami"
    assert parse({"g6_image": "prebuilt"}).backend("g6").image_choice == "prebuilt"
    assert parse({}).backend("inf2").image_choice is None
    assert config_error(g6_image="ami", backends="inf2") == (
        "g6_image='ami'; valid: dlami (install vLLM at boot), prebuilt (the vllm-cuda image pipeline's AMI)")


KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.mark.parametrize("value", [
    KEY,
    "arn:aws:kms:us-east-1:111122223333:key/mrk-1234abcd12ab34cd56ef1234567890ab",  # a multi-Region key
])
def test_image_kms_key_takes_a_key_arn(value):
    assert parse({"image_kms_key": value}).image_kms_key == value
    assert parse({}).image_kms_key is None and parse({"image_kms_key": ""}).image_kms_key is None


@pytest.mark.parametrize("value", [
    "1234abcd-12ab-34cd-56ef-1234567890ab",  # a key id: not where the key lives
    "alias/inference-kit/neuron",
    "arn:aws:kms:us-east-1:111122223333:alias/inference-kit/neuron",  # an alias can move to another key
    "arn:aws:kms:us-east-1:1111:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "arn:aws:s3:::bucket",
    42,
])
def test_image_kms_key_that_is_not_a_key_arn_is_one_line(value):
    msg = config_error(image_kms_key=value)
    assert msg.startswith(f"image_kms_key={value!r} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/")


def test_image_kms_key_in_an_unknown_region_is_one_line():
    msg = config_error(image_kms_key=KEY.replace("us-east-1", "zz-fake-9"))
    assert "'zz-fake-9' is not a region botocore" in msg


def test_image_kms_key_must_be_where_every_image_is_built():
    """KMS keys are regional: a recipe in us-west-2 cannot name a us-east-1 key."""
    msg = config_error(image_kms_key=KEY, g5g_region="us-west-2")
    assert msg == (f"image_kms_key={KEY!r} is a key in us-east-1, but the configuration builds images in "
                   "us-west-2 too (a KMS key is regional); give a key there, or leave image_kms_key out and "
                   "each image stack makes its own")
    # A backend without a kit image elsewhere (SageMaker: no image stack) is no conflict.
    assert parse({"image_kms_key": KEY, "sagemaker_region": "us-west-2"}).image_kms_key == KEY
    # Nor is a configuration that builds no image at all.
    assert parse({"image_kms_key": KEY.replace("us-east-1", "eu-west-1"), "backends": "bedrock,sagemaker"})


def test_cdk_json_leaves_region_and_backends_to_the_context_file():
    """The CDK CLI takes a context key from the first source that has it: -c, then cdk.json's
    "context", then cdk.context.json (aws-cdk-cli packages/aws-cdk/lib/cli/user-configuration.ts,
    contextSources, and Context.get/all: the first bag wins; read in the CLI 2.1148.1 the kit pins,
    node_modules/aws-cdk/lib/index.js). An attendee's cdk.context.json (region, backends, <id>_ami) must
    not be shadowed by the repository's cdk.json, so cdk.json sets neither; kit/config.py's
    defaults stand in for both."""
    import json

    from kit import regions
    from kit.config import DEFAULTS
    from tests.stacks.conftest import ROOT

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert "region" not in context and "backends" not in context
    assert DEFAULTS["region"] == regions.DEFAULT_REGION
    assert parse({}).region == regions.DEFAULT_REGION and parse({}).backend_ids == BACKEND_IDS
