"""Variants (kit/variants.py, ``-c <id>_variants``): one more stack per precision, side by side.

Two g6 variants and one SageMaker variant synthesized for real (cdk-nag runs during synthesis):
distinct stacks, names, instances and subnet blocks; the same output keys plus Variant and Scheme;
guardrails in each; every problem in the value a one-line ConfigError.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kit import variants
from kit.catalog import GEMMA_E2B
from kit.config import ConfigError, parse
from kit.contracts.outputs import COMMON_KEYS, KIND_KEYS, VARIANT_KEYS, keys_for
from tests.stacks.conftest import ROOT, synth

G6_VARIANTS = f"bf16={GEMMA_E2B},int8=package:int8"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("cdk-variants"), backends="g6,sagemaker", g6_variants=G6_VARIANTS,
                 sagemaker_variants={"emb4": "package:emb4"})


def _outputs(t: dict) -> dict[str, object]:
    return {k: v["Value"] for k, v in t.get("Outputs", {}).items()}


def test_two_variants_are_two_more_stacks_with_their_own_instances(two):
    assert {"G6Stack", "G6Stack-bf16", "G6Stack-int8", "SageMakerStack", "SageMakerStack-emb4",
            "NetworkStack", "PackageStack"} <= set(two.stacks)
    for name in ("G6Stack", "G6Stack-bf16", "G6Stack-int8"):
        assert len(two.resources(name, "AWS::EC2::Instance")) == 1
    # the shared VPC: every stack imports NetworkStack's VPC id, none makes a VPC of its own
    for name in ("G6Stack-bf16", "G6Stack-int8"):
        assert not two.resources(name, "AWS::EC2::VPC")


def test_variant_outputs_are_the_backend_keys_plus_variant_and_scheme(two):
    base = _outputs(two.templates["G6Stack"])
    bf16, int8 = _outputs(two.templates["G6Stack-bf16"]), _outputs(two.templates["G6Stack-int8"])
    want = {*COMMON_KEYS, *KIND_KEYS["ec2"]}
    assert set(base) == want
    assert set(bf16) == want | set(VARIANT_KEYS)
    assert set(int8) == want | set(VARIANT_KEYS) | {"PackageUri"}  # g6 serving a package (stacks/ec2_backend.py)
    # the contract's own word for each stack (kit/contracts/outputs.py)
    assert set(bf16) == set(keys_for("ec2", variant=True))
    assert set(int8) == set(keys_for("ec2", variant=True, package=True))
    assert (bf16["Variant"], bf16["ModelId"], bf16["Scheme"]) == ("bf16", GEMMA_E2B, "bf16")
    assert (int8["Variant"], int8["ModelId"], int8["Scheme"]) == ("int8", "package:int8", "int8")
    assert bf16["BackendId"] == int8["BackendId"] == "g6"
    sm = _outputs(two.templates["SageMakerStack-emb4"])
    assert set(sm) == {*COMMON_KEYS, *KIND_KEYS["sagemaker"], *VARIANT_KEYS} == set(keys_for("sagemaker", variant=True))
    assert (sm["Variant"], sm["Scheme"], sm["ModelId"]) == ("emb4", "emb4", "package:emb4")


def test_each_variant_owns_its_subnet_block_and_guardrails(two):
    from stacks.guardrails import IDLE_TAG, TTL_TAG, ttl_expiry
    from tests.stacks.conftest import FIXED_NOW

    expected_ttl = ttl_expiry(FIXED_NOW, two.config.ttl_hours)
    bases = set()
    for name in ("G6Stack", "G6Stack-bf16", "G6Stack-int8"):
        (_, choice), = two.resources(name, "Custom::AzChoice").items()
        bases.add(choice["Properties"]["CidrBase"])
        # idle stop and the TTL stop: the same guardrails as the backend's own stack, on its own instance
        (inst_id, inst), = two.resources(name, "AWS::EC2::Instance").items()
        (_, alarm), = two.resources(name, "AWS::CloudWatch::Alarm").items()
        assert alarm["Properties"]["Dimensions"] == [{"Name": "InstanceId", "Value": {"Ref": inst_id}}]
        (_, schedule), = two.resources(name, "AWS::Scheduler::Schedule").items()
        assert inst_id in json.dumps(schedule["Properties"]["Target"])  # stops this stack's instance
        tags = {t["Key"]: t["Value"] for t in inst["Properties"]["Tags"]}
        assert tags[TTL_TAG] == str(int(expected_ttl.timestamp())) and tags[IDLE_TAG] == "60"
    assert len(bases) == 3
    assert all(int(b) + 7 <= 255 for b in bases)


def test_variant_templates_pass_cfn_lint(two):
    from tests.conftest import require_binary

    lint = require_binary(str(ROOT / ".venv/bin/cfn-lint"))
    files = [str(two.outdir / f"{n}.template.json") for n in ("G6Stack-bf16", "G6Stack-int8", "SageMakerStack-emb4")]
    r = subprocess.run([lint, *files, "--regions", two.config.region], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_variant_instances_serve_their_model(two):
    from tests.stacks.test_ec2_backends import kit_env, user_data

    envs = {}
    for name in ("G6Stack-bf16", "G6Stack-int8"):
        (_, inst), = two.resources(name, "AWS::EC2::Instance").items()
        envs[name] = kit_env(user_data(inst))
    assert envs["G6Stack-bf16"]["KIT_MODEL"] == GEMMA_E2B
    assert envs["G6Stack-int8"]["KIT_MODEL"] == "package:int8"
    assert envs["G6Stack-int8"]["KIT_MODEL_PARAM"] == "/inference-kit/package/int8"
    assert "KIT_MODEL_PARAM" not in envs["G6Stack-bf16"]


def test_sagemaker_variant_names_its_own_endpoint(two):
    names = [r["Properties"]["EndpointName"] for r in two.resources("SageMakerStack-emb4", "AWS::SageMaker::Endpoint").values()]
    base = [r["Properties"]["EndpointName"] for r in two.resources("SageMakerStack", "AWS::SageMaker::Endpoint").values()]
    assert names and not set(names) & set(base)
    # its TTL guard deletes its own endpoint, not the backend's
    (_, schedule), = two.resources("SageMakerStack-emb4", "AWS::Scheduler::Schedule").items()
    target = json.dumps(schedule["Properties"]["Target"])
    assert names[0] in target and base[0] not in target.replace(names[0], "")


def _parse(**ctx):
    return parse({"backends": "g6,sagemaker,inf2", **ctx})


def test_config_variants_in_order_with_the_backends_settings():
    c = _parse(g6_variants=G6_VARIANTS, g6_instance_type="g6.2xlarge")
    assert [(v.id, v.variant, v.slot, v.model_id, v.instance_type) for v in c.variants] == [
        ("g6", "bf16", 0, GEMMA_E2B, "g6.2xlarge"), ("g6", "int8", 1, "package:int8", "g6.2xlarge")]
    assert [d.variant for d in c.deployments] == [None, None, None, "bf16", "int8"]
    # cdk.json's form: an object
    assert [v.variant for v in _parse(g6_variants={"a": GEMMA_E2B}).variants] == ["a"]
    # a backend not selected: its variants are checked, not built
    assert _parse(g5g_variants="x=" + GEMMA_E2B).variants == ()


@pytest.mark.parametrize("ctx,want", [
    ({"g6_variants": "bf16"}, "item 'bf16' is not NAME=MODEL"),
    ({"g6_variants": "BF16=" + GEMMA_E2B}, "variant name 'BF16' is not 1-16 lowercase"),
    ({"g6_variants": "a_b=" + GEMMA_E2B}, "variant name 'a_b'"),
    ({"g6_variants": "-a=" + GEMMA_E2B}, "variant name '-a'"),
    ({"g6_variants": "x" * 17 + "=" + GEMMA_E2B}, "is not 1-16"),
    ({"g6_variants": f"a={GEMMA_E2B},a=package"}, "variant name 'a' is given twice"),
    ({"g6_variants": "a="}, "variant 'a' has no model"),
    ({"g6_variants": ",".join(f"v{i}={GEMMA_E2B}" for i in range(4))}, "at most 3 per backend"),
    ({"g6_variants": "a=s3://bucket/model"}, "g6_variants[a]='s3://bucket/model' is an S3 URI"),
    ({"g6_variants": "a=not a repo"}, "g6_variants[a]='not a repo'"),
    ({"g6_variants": "a=package:nope"}, "g6_variants[a]='package:nope': unknown package scheme"),
    ({"inf2_variants": "a=package:emb4"}, "inf2_variants[a]='package:emb4': packages are served by"),
    ({"bedrock_variants": "a=x"}, "unknown context key 'bedrock_variants'"),
    ({"g6_variants": 3}, "is not NAME=MODEL[@INSTANCE_TYPE] items"),
])
def test_bad_variants_are_one_config_error(ctx, want):
    with pytest.raises(ConfigError) as e:
        _parse(**ctx)
    assert want in str(e.value) and "\n" not in str(e.value)


def test_bad_variants_through_cdk_are_one_line_exit_2():
    """The real app.py: one line on stderr, exit 2, no traceback."""
    import os

    env = {**os.environ, "CDK_CONTEXT_JSON": '{"g6_variants": "Bad=x"}'}
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "config error: g6_variants: variant name 'Bad' is not 1-16 lowercase letters, digits or - "
        "(starting and ending with a letter or digit)"]


def test_names():
    assert variants.stack_name("g6", "bf16") == "G6Stack-bf16" and variants.stack_name("g6", None) == "G6Stack"
    assert variants.endpoint_name("g6", "bf16") == "g6@bf16"
    assert variants.split("g6@bf16") == ("g6", "bf16") and variants.split("local") == ("local", None)
    assert variants.from_stack_name("G6Stack-bf16") == ("g6", "bf16")
    assert variants.from_stack_name("G6Stack") is None and variants.from_stack_name("G6Stack-Bad") is None
    assert variants.scheme_of("package") == "emb4" and variants.scheme_of("x/y") is None
    assert variants.label("g6@bf16", GEMMA_E2B) == f"g6@bf16 · {GEMMA_E2B} (bf16)"
    assert variants.label("g6@int8", "package:int8") == "g6@int8 · package:int8"
