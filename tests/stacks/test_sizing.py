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


def test_neuron_refuses_a_size_without_a_port(tmp_path):
    with pytest.raises(ConfigError, match=r"inf2_instance_type='inf2.xlarge'.*no inf2 type in the catalog serves it"):
        synth(tmp_path, backends="inf2", model="google/gemma-4-26B-A4B-it")


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
