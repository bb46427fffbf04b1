"""Any Gemma 4 size deploys where it fits, sized by the planner, or is refused in one line."""
from __future__ import annotations

import pytest

from kit.config import ConfigError
from tests.stacks.conftest import synth
from tests.stacks.test_ec2_backends import kit_env, user_data

GEMMA_31B = "google/gemma-4-31B-it"


def test_31b_refuses_one_l4_naming_the_smallest_type_that_fits(tmp_path):
    with pytest.raises(ConfigError) as e:
        synth(tmp_path, backends="g6", model=GEMMA_31B)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("g6_instance_type='g6.xlarge': google/gemma-4-31B-it (bf16, max_model_len 4096) "
                          "does not fit g6.xlarge: 61.4 GB weights / TP 1")
    assert msg.endswith("smallest g6 type that fits: g7e.2xlarge (TP 1); set -c g6_instance_type=g7e.2xlarge")


def test_31b_on_four_l40s_gets_tp_volume_and_readiness(tmp_path):
    s = synth(tmp_path, backends="g6", model=GEMMA_31B, g6_instance_type="g6e.12xlarge")
    _, instance = s.one("G6Stack", "AWS::EC2::Instance")
    env = kit_env(user_data(instance))
    assert env["KIT_TENSOR_PARALLEL"] == "4" and env["KIT_MODEL"] == GEMMA_31B
    props = instance["Properties"]
    # 150 GiB for E2B, plus (61.4 GB - E2B's 9.3 GB) x 1.25 headroom = 61 GiB more.
    assert props["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 150 + 61
    # 45 minutes for E2B, plus 52.1 GB at 50 MB/s = 18 minutes more.
    assert instance["CreationPolicy"]["ResourceSignal"]["Timeout"] == "PT63M"
    text = s.stacks["G6Stack"].server.user_data_text
    assert '--tensor-parallel-size "$KIT_TENSOR_PARALLEL"' in text


def test_default_e2b_deployment_is_unchanged(kit):
    _, instance = kit.one("G6Stack", "AWS::EC2::Instance")
    assert "KIT_TENSOR_PARALLEL" not in kit_env(user_data(instance))
    assert instance["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 150


@pytest.mark.parametrize("model,ok", [("google/gemma-4-E4B-it", "g6.xlarge"), ("google/gemma-4-26B-A4B-it", None)])
def test_e4b_fits_one_l4_26b_does_not(tmp_path, model, ok):
    if ok:
        synth(tmp_path, backends="g6", model=model)
    else:
        with pytest.raises(ConfigError, match=r"26B-A4B-it.*52\.9 GB per GPU > 21\.6 GB.*g7e\.2xlarge"):
            synth(tmp_path, backends="g6", model=model)


def test_sagemaker_sizes_each_endpoint(tmp_path):
    s = synth(tmp_path, backends="sagemaker", sagemaker_model="google/gemma-4-26B-A4B-it",
              sagemaker_instance_types="ml.g6e.12xlarge,ml.g7e.2xlarge")
    models = s.resources("SageMakerStack", "AWS::SageMaker::Model")
    tp = {k: m["Properties"]["PrimaryContainer"]["Environment"]["SM_VLLM_TENSOR_PARALLEL_SIZE"] for k, m in models.items()}
    assert tp == {"ModelMlG6E12Xlarge": "4", "ModelMlG7E2Xlarge": "1"}
    for cfg in s.resources("SageMakerStack", "AWS::SageMaker::EndpointConfig").values():
        v = cfg["Properties"]["ProductionVariants"][0]
        # 1800 s for E2B plus 14 minutes for 41.2 GB more at 50 MB/s.
        assert v["ContainerStartupHealthCheckTimeoutInSeconds"] == 1800 + 14 * 60
    with pytest.raises(ConfigError, match=r"sagemaker_instance_types='ml.g6.xlarge'.*"
                                          r"set -c sagemaker_instance_types=ml.g7e.2xlarge"):
        synth(tmp_path / "x", backends="sagemaker", sagemaker_model="google/gemma-4-26B-A4B-it")


@pytest.mark.parametrize("backend,model,why", [
    ("inf2", "google/gemma-4-26B-A4B-it", "no public Neuron port of Gemma 4 26B A4B"),
    ("trn1", "google/gemma-4-E4B-it", "no public Neuron port of Gemma 4 E4B"),
    ("inf2", "Qwen/Qwen3-8B", "not a Gemma 4 size the kit knows")])
def test_neuron_refuses_a_model_without_the_engines_port(tmp_path, backend, model, why):
    with pytest.raises(ConfigError) as e:
        synth(tmp_path, backends=backend, model=model)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{backend}_instance_type='{backend}.{'xlarge' if backend == 'inf2' else '2xlarge'}': "
                          f"{model}: the kit's Neuron engine serves only the model whose Neuron port it loads "
                          f"(Gemma 4 E2B, NxD Inference contrib PR #115), and {why}; valid: google/gemma-4-E2B-it"), msg


def test_neuron_refusal_through_cdk_is_one_line_exit_2():
    """The real app.py: one line on stderr, exit 2, no traceback, before anything is deployed."""
    import os
    import subprocess
    import sys

    from tests.stacks.conftest import ROOT

    env = {**os.environ, "CDK_CONTEXT_JSON": '{"backends": "inf2", "model": "google/gemma-4-E4B-it"}'}
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("config error: inf2_instance_type='inf2.xlarge': google/gemma-4-E4B-it: the kit's "
                           "Neuron engine serves only"), line


def test_neuron_stack_gets_the_planners_compile(tmp_path):
    """max_model_len 8192 on trn1.32xlarge: the boot gets the planner's degree (8: the largest of
    trn1's 1, 2, 8, 16, 32 dividing E2B's 8 heads), batch, total tokens and prompt buckets."""
    s = synth(tmp_path, backends="trn1", trn1_instance_type="trn1.32xlarge", max_model_len=8192)
    _, instance = s.one("Trn1Stack", "AWS::EC2::Instance")
    env = {k: v.strip("'") for k, v in kit_env(user_data(instance)).items()}
    assert {k: env[k] for k in ("KIT_TP_DEGREES", "KIT_NEURON_PLATFORM", "KIT_NEURON_TP_DEGREE",
                                "KIT_NEURON_BATCH_SIZE", "KIT_MAX_MODEL_LEN", "KIT_NEURON_PROMPT_BUCKETS")} == {
        "KIT_TP_DEGREES": "1,2,8,16,32", "KIT_NEURON_PLATFORM": "trn1", "KIT_NEURON_TP_DEGREE": "8",
        "KIT_NEURON_BATCH_SIZE": "4", "KIT_MAX_MODEL_LEN": "8192", "KIT_NEURON_PROMPT_BUCKETS": "128,512,2048,4096"}


def test_gpu_families_in_one_run(tmp_path):
    types = "ml.g5.xlarge,ml.g6.xlarge,ml.g6e.xlarge,ml.g7e.2xlarge"
    s = synth(tmp_path, backends="sagemaker", sagemaker_instance_types=types)
    t = s.template("SageMakerStack")
    t.resource_count_is("AWS::SageMaker::Endpoint", 4)
    variants = [c["Properties"]["ProductionVariants"][0]
                for c in s.resources("SageMakerStack", "AWS::SageMaker::EndpointConfig").values()]
    assert sorted(v["InstanceType"] for v in variants) == sorted(types.split(","))
    out = s.templates["SageMakerStack"]["Outputs"]["EndpointNames"]["Value"]
    assert out.count("=") == 4  # what discovery expands into sagemaker@g5-xlarge, ... (harness/discovery.py)


@pytest.mark.parametrize("context", [
    {"model": GEMMA_31B, "g6_instance_type": "g4dn.xlarge"},  # one 16 GB T4: would fail at load
    {"model": GEMMA_31B, "g6_instance_type": "g6.4xlarge"},  # one L4, and no extra volume for 61 GB
])
def test_a_gpu_type_the_catalog_lacks_is_refused_not_deployed_unsized(tmp_path, context):
    # The config's family and botocore checks accept these; without the catalog's GPU count and
    # memory the planner cannot size TP, volume or readiness, so the stack must not synthesize.
    with pytest.raises(ConfigError) as e:
        synth(tmp_path, backends="g6", **context)
    msg = str(e.value)
    t = context["g6_instance_type"]
    assert "\n" not in msg
    assert msg.startswith(f"g6_instance_type='{t}': {GEMMA_31B}: {t} has no GPU count or memory in the catalog")
    assert msg.endswith("smallest g6 type that fits: g7e.2xlarge (TP 1); set -c g6_instance_type=g7e.2xlarge")


def test_a_variant_twin_on_a_type_the_catalog_lacks_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"g4dn\.xlarge has no GPU count or memory in the catalog") as e:
        synth(tmp_path, backends="g6", g6_variants="t4=@g4dn.xlarge")
    assert "\n" not in str(e.value)
