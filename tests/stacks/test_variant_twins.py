"""The EC2 twins of the GPU-family sweep, synthesized: ``-c g6_variants=g5=@g5.xlarge,...`` makes one
stack per item on its own instance type, in its own declared subnet block (kit/subnets.py), sized by
the planner for its model (TP, volume); a type the planner says cannot hold the model is one config
line naming the item and the smallest type that fits."""
from __future__ import annotations

import pytest

from kit import subnets
from kit.catalog import GEMMA_E2B_INT4
from kit.config import ConfigError
from tests.stacks.conftest import synth
from tests.stacks.test_ec2_backends import kit_env, user_data

GEMMA_31B = "google/gemma-4-31B-it"
TWINS = f"g5=@g5.xlarge,g7e=@g7e.2xlarge,big={GEMMA_31B}@g6e.12xlarge"


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("cdk-twins"), backends="g6", g6_variants=TWINS)


def _instance(s, stack: str) -> dict:
    (_, inst), = s.resources(stack, "AWS::EC2::Instance").items()
    return inst


def test_each_twin_stack_runs_its_own_instance_type(twins):
    types = {name: _instance(twins, name)["Properties"]["InstanceType"]
             for name in ("G6Stack", "G6Stack-g5", "G6Stack-g7e", "G6Stack-big")}
    assert types == {"G6Stack": "g6.xlarge", "G6Stack-g5": "g5.xlarge", "G6Stack-g7e": "g7e.2xlarge",
                     "G6Stack-big": "g6e.12xlarge"}
    outputs = {k: v["Value"] for k, v in twins.templates["G6Stack-g5"]["Outputs"].items()}
    # what discovery reads: g6@g5 on g5.xlarge (harness/discovery.py)
    assert (outputs["BackendId"], outputs["Variant"], outputs["InstanceType"]) == ("g6", "g5", "g5.xlarge")
    assert outputs["ModelId"] == GEMMA_E2B_INT4


def test_each_twin_takes_its_slots_declared_subnet_block(twins):
    got = {}
    for name in ("G6Stack", "G6Stack-g5", "G6Stack-g7e", "G6Stack-big"):
        (_, choice), = twins.resources(name, "Custom::AzChoice").items()
        got[name] = int(choice["Properties"]["CidrBase"])
        # the AZ is chosen among those offering the stack's own type (stacks/az_choice.py)
        assert choice["Properties"]["InstanceTypes"] == [_instance(twins, name)["Properties"]["InstanceType"]]
    assert got == {"G6Stack": subnets.backend_block("g6"), "G6Stack-g5": subnets.backend_block("g6", 0),
                   "G6Stack-g7e": subnets.backend_block("g6", 1), "G6Stack-big": subnets.backend_block("g6", 2)}
    assert got == {"G6Stack": 64, "G6Stack-g5": 160, "G6Stack-g7e": 168, "G6Stack-big": 176}


def test_tensor_parallel_and_volume_come_from_the_planner(twins):
    envs = {n: kit_env(user_data(_instance(twins, n))) for n in ("G6Stack-g5", "G6Stack-big")}
    assert "KIT_TENSOR_PARALLEL" not in envs["G6Stack-g5"]  # one A10G holds the w4a16 E2B
    # 31B in bf16 on four L40S: TP 4 (tests/stacks/test_sizing.py works the same numbers), its own volume
    assert envs["G6Stack-big"]["KIT_TENSOR_PARALLEL"] == "4" and envs["G6Stack-big"]["KIT_MODEL"] == GEMMA_31B
    big = _instance(twins, "G6Stack-big")["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    g5 = _instance(twins, "G6Stack-g5")["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    assert (g5, big) == (150, 150 + 61)


def test_a_twin_the_model_does_not_fit_is_one_line_naming_the_item(tmp_path):
    with pytest.raises(ConfigError) as e:
        synth(tmp_path, backends="g6", g6_variants=f"big={GEMMA_31B}@g6.xlarge")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"g6_variants[big]='g6.xlarge': {GEMMA_31B} (bf16, max_model_len 4096) does not fit "
                          "g6.xlarge: 61.4 GB weights / TP 1"), msg
    assert msg.endswith(f"smallest g6 type that fits: g7e.2xlarge (TP 1); in -c g6_variants give "
                        f"big={GEMMA_31B}@g7e.2xlarge"), msg


def test_discovery_names_the_twins_from_their_synthesized_outputs(twins):
    """The twin stacks' real outputs (references given deploy-time values) -> g6@g5 on g5.xlarge ..."""
    from harness import discovery as disc

    outputs = {}
    for i, name in enumerate(("G6Stack", "G6Stack-g5", "G6Stack-g7e", "G6Stack-big")):
        outputs[name] = {k: v["Value"] if isinstance(v["Value"], str) else f"i-0{i:016d}"
                         for k, v in twins.templates[name]["Outputs"].items()}
    d = disc.from_outputs(outputs, "us-east-1", ["g6"])
    got = {e.name: (e.instance_type, e.model_id, e.stack_name) for e in d.endpoints}
    assert got == {"g6": ("g6.xlarge", GEMMA_E2B_INT4, "G6Stack"),
                   "g6@g5": ("g5.xlarge", GEMMA_E2B_INT4, "G6Stack-g5"),
                   "g6@g7e": ("g7e.2xlarge", GEMMA_E2B_INT4, "G6Stack-g7e"),
                   "g6@big": ("g6e.12xlarge", GEMMA_31B, "G6Stack-big")}
    g5 = next(e for e in d.endpoints if e.name == "g6@g5")
    assert g5.label == "vLLM on EC2 g6 (L4), variant g5 on g5.xlarge"
    # --backends g6@g7e names one twin
    assert [e.name for e in disc.from_outputs(outputs, "us-east-1", ["g6@g7e"]).endpoints] == ["g6@g7e"]
