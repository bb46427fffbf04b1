"""Config that only looks valid: region, instance type, AZ and model id are
checked against the real lists the kit carries (kit/awsdata.py), each list tested against its
source: botocore's data, cfn-lint's AZ table, huggingface_hub's repo-id rules."""
from __future__ import annotations

import pytest

from kit import awsdata
from kit.catalog import BACKENDS
from kit.config import parse
from tests.stacks.conftest import config_error


# Each passed the old pattern checks and would have failed at deploy time, or on the instance.
@pytest.mark.parametrize("context, want", [
    ({"region": "zz-fake-9"}, "region='zz-fake-9' is not a region botocore"),
    ({"region": "us-east-9"}, "did you mean us-east-2, us-east-1"),
    ({"g6_region": "us-fake-1"}, "g6_region='us-fake-1' is not a region botocore"),
    ({"g6_instance_type": "g6.99xlarge"}, "g6_instance_type='g6.99xlarge' is not an EC2 instance type botocore"),
    ({"g6_instance_type": "g6.99xlarge"}, "valid g6.* sizes: g6.xlarge, g6.2xlarge"),
    ({"g5g_instance_type": "g5g.3xlarge"}, "valid g5g.* sizes: g5g.xlarge, g5g.2xlarge, g5g.4xlarge"),
    ({"azs": "us-east-1z"}, "azs: 'us-east-1z' is not an Availability Zone of us-east-1; valid: us-east-1a,"),
    ({"azs": "us-west-1a,us-west-1b", "region": "us-west-1"}, "'us-west-1b' is not an Availability Zone of us-west-1; valid: us-west-1a, us-west-1c"),
    ({"g6_az": "us-east-1g"}, "g6_az='us-east-1g' is not an Availability Zone of us-east-1, where g6 deploys; valid"),
    ({"image_az": "us-east-2d", "region": "us-east-2"}, "image_az='us-east-2d' is not an Availability Zone of us-east-2; valid"),
    # a " broke the readiness check's JSON on the instance; ../ moved the Neuron model directory
    ({"model": 'google/gemma"x'}, "model='google/gemma\"x' is not a Hugging Face model id"),
    ({"inf2_model": "../../etc"}, "inf2_model='../../etc' has more than one '/'"),
    ({"inf2_model": "google/../x"}, "has more than one '/'"),
    ({"inf2_model": "..x/y"}, "is not a Hugging Face model id"),
    ({"g6_model": "a..b/c"}, "'--' and '..' are not allowed"),
    ({"g6_model": "org/name.git"}, "may not end in '.git'"),
    ({"g6_model": "s3://bucket/model"}, "is an S3 URI: no engine of the kit loads one directly"),
    ({"g6_model": "org/" + "x" * 97}, "at most 96"),
    ({"g6_model": "org/modèle"}, "is not a Hugging Face model id"),
    ({"g6_model": "org/name$(reboot)"}, "is not a Hugging Face model id"),
    ({"bedrock_model": 'us.amazon.nova"micro'}, "is not a Bedrock model or inference profile id"),
    ({"bedrock_model": "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-micro-v1:0"}, "not an ARN"),
    ({"bedrock_model": "amazon/nova"}, "is not a Bedrock model or inference profile id"),
])
def test_values_that_only_look_valid_are_refused_in_one_line(context, want):
    assert want in config_error(**context)


def _seen(cfg) -> dict:
    """What parse kept of the values under test: the region, the AZs, and per backend its region,
    instance type(s) and model."""
    out = {"region": cfg.region, "azs": cfg.azs}
    for b in cfg.backends:
        out[f"{b.id}.region"] = b.region
        out[f"{b.id}.instance_type"] = b.instance_type
        out[f"{b.id}.instance_types"] = b.instance_types
        out[f"{b.id}.model"] = b.model_id
    return out


# Each real value passes and is what the config holds afterwards; the same context with one value
# made wrong (the last two columns) is refused, so the check these values pass is one that bites.
@pytest.mark.parametrize("context, holds, wrong, refusal", [
    ({"region": "eu-west-1", "azs": "eu-west-1a,eu-west-1c"},
     {"region": "eu-west-1", "azs": ("eu-west-1a", "eu-west-1c"), "g6.region": "eu-west-1"},
     {"azs": "eu-west-1a,eu-west-1d"}, "azs: 'eu-west-1d' is not an Availability Zone of eu-west-1"),
    # in botocore 1.44.8's partitions.json; not in the AZ table: AZs by pattern only
    ({"region": "me-west-1"}, {"region": "me-west-1", "inf2.region": "me-west-1", "azs": ()},
     {"region": "me-west-2"}, "region='me-west-2' is not a region botocore"),
    ({"region": "me-west-1", "azs": "me-west-1a,me-west-1b"}, {"azs": ("me-west-1a", "me-west-1b")},
     {"azs": "me-west-1a,us-east-1b"}, "'us-east-1b' is not an Availability Zone of me-west-1"),
    ({"g6_instance_type": "g6.2xlarge", "inf2_instance_type": "inf2.8xlarge"},
     {"g6.instance_type": "g6.2xlarge", "inf2.instance_type": "inf2.8xlarge"},
     {"g6_instance_type": "g6.3xlarge"}, "g6_instance_type='g6.3xlarge' is not an EC2 instance type"),
    ({"sagemaker_instance_types": "ml.g6.xlarge,ml.g5.xlarge"},
     {"sagemaker.instance_types": ("ml.g6.xlarge", "ml.g5.xlarge"), "sagemaker.instance_type": "ml.g6.xlarge"},
     {"sagemaker_instance_types": "ml.g6.xlarge,ml.g5.3xlarge"}, "'ml.g5.3xlarge': has no GPU count in the catalog"),
    ({"model": "Qwen/Qwen3-8B", "inf2_model": "gpt2"},
     {"g6.model": "Qwen/Qwen3-8B", "trn1.model": "Qwen/Qwen3-8B", "inf2.model": "gpt2"},
     {"inf2_model": "gpt2.git"}, "inf2_model='gpt2.git' is not a Hugging Face model id"),
    ({"g6_model": "package:emb4"}, {"g6.model": "package:emb4"},
     {"g6_model": "package:emb 4"}, "g6_model='package:emb 4'"),
    ({"bedrock_model": "amazon.nova-micro-v1:0"}, {"bedrock.model": "amazon.nova-micro-v1:0"},
     {"bedrock_model": "amazon.nova micro-v1:0"}, "is not a Bedrock model or inference profile id"),
])
def test_real_values_pass(context, holds, wrong, refusal):
    seen = _seen(parse(context))
    assert {k: seen[k] for k in holds} == holds
    assert refusal in config_error(**{**context, **wrong})


def test_sagemaker_types_are_botocores():
    assert awsdata.instance_type_problem("ml.g6.xlarge", "sagemaker") is None
    assert "not a SageMaker endpoint instance type" in awsdata.instance_type_problem("ml.g6.99xlarge", "sagemaker")


def test_every_catalog_default_is_valid():
    cfg = parse({})
    for b in cfg.backends:
        assert b.model_id == BACKENDS[b.id].model_id
        for t in b.instance_types or (b.instance_type,):
            assert t is None or awsdata.instance_type_problem(t, BACKENDS[b.id].service) is None


def test_region_list_is_botocores():
    import json
    from pathlib import Path

    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    aws = next(p for p in data["partitions"] if p["id"] == "aws")
    assert {"us-east-1", "us-east-2", "eu-west-1"} <= awsdata.regions()
    assert set(aws["regions"]) - {"aws-global"} <= awsdata.regions()
    assert not any(r.endswith("-global") for r in awsdata.regions())


def test_az_table_is_cfn_lints():
    helpers = pytest.importorskip("cfnlint.helpers")
    theirs = {r: tuple(z) for r, z in helpers.AVAILABILITY_ZONES.items()}
    assert awsdata.AVAILABILITY_ZONES == theirs


IDS = ["gpt2", "google/gemma-4-E2B-it", "Qwen/Qwen3-8B", "a/b", "Foo-BAR_foo.bar123", "123",
       "datasets/foo/bar", ".repo", "repo.", "-repo", "foo--bar", "foo..bar", "foo.git", "org/x.git",
       "", "/", "a/", "/a", "x" * 96, "x" * 97, "o/" + "x" * 96, "café", 'a"b', "a b", "../x",
       "a/../b", "s3://b/k", "org/name$x", "a_b/c_d", "_a", "a_", "a.b/c.d"]


@pytest.mark.parametrize("repo_id", IDS)
def test_hf_grammar_agrees_with_huggingface_hub(repo_id):
    validators = pytest.importorskip("huggingface_hub.utils._validators")
    try:
        validators.validate_repo_id(repo_id)
        theirs = True
    except validators.HFValidationError:
        theirs = False
    assert (awsdata.hf_repo_id_problem(repo_id) is None) == theirs, repo_id


def test_bedrock_pattern_is_botocores():
    import botocore.session

    shape = botocore.session.get_session().get_service_model("bedrock-runtime") \
        .operation_model("Converse").input_shape.members["modelId"]
    assert awsdata.bedrock_model_pattern().pattern == shape.metadata["pattern"]
    for ok in ("us.amazon.nova-micro-v1:0", "amazon.nova-micro-v1:0", "anthropic.claude-3-haiku-20240307-v1:0"):
        assert awsdata.bedrock_model_problem(ok) is None, ok


@pytest.mark.parametrize("context, needle", [
    ({"region": "zz-fake-9"}, "config error: region='zz-fake-9' is not a region botocore"),
    ({"g6_instance_type": "g6.99xlarge"}, "config error: g6_instance_type='g6.99xlarge' is not an EC2 instance type"),
    ({"inf2_model": "../../x"}, "config error: inf2_model='../../x' has more than one '/'"),
])
def test_app_refuses_in_one_line_exit_2(tmp_path, context, needle):
    """The CDK app itself (as `cdk synth` runs it, context in CDK_CONTEXT_JSON): one line, exit 2."""
    import json
    import os
    import subprocess
    import sys

    from tests.stacks.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(CDK_CONTEXT_JSON=json.dumps(context), CDK_OUTDIR=str(tmp_path / "out"),
               JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stderr.splitlines() if line.startswith("config error:")]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_harness_commands_refuse_an_unknown_region(capsys):
    from harness.account import preflight
    from harness.run import cli as run

    assert preflight.main(["--region", "zz-fake-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--region='zz-fake-9' is not a region botocore" in err[0], err
    assert run.main(["--region", "zz-fake-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--region='zz-fake-9' is not a region botocore" in err[0], err
