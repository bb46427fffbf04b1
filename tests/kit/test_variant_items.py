"""``<id>_variants`` items that set the instance type (kit/variants.py grammar NAME=[MODEL][@TYPE]):
the EC2 twins of the GPU-family sweep. Good input parses into deployments; bad input is one
ConfigError line naming the item and what would be valid."""
from __future__ import annotations

import pytest

from kit import variants
from kit.catalog import GEMMA_E2B, GEMMA_E2B_INT4
from kit.config import ConfigError, parse

TWINS = "g5=@g5.xlarge,g6e=@g6e.xlarge,g7e=google/gemma-4-E4B-it@g7e.2xlarge"


def test_items_split_at_the_last_at():
    assert variants.parse("g6", TWINS) == (
        ("g5", "", "g5.xlarge"), ("g6e", "", "g6e.xlarge"), ("g7e", "google/gemma-4-E4B-it", "g7e.2xlarge"))
    # the old form is unchanged: a model, no type
    assert variants.parse("g6", f"bf16={GEMMA_E2B}") == (("bf16", GEMMA_E2B, None),)
    assert variants.parse("g6", {"int8": "package:int8@g6e.xlarge"}) == (("int8", "package:int8", "g6e.xlarge"),)


def test_twins_are_deployments_on_their_own_types_in_their_own_slots():
    c = parse({"backends": "g6", "g6_variants": TWINS})
    assert [(d.variant, d.slot, d.instance_type, d.model_id) for d in c.variants] == [
        ("g5", 0, "g5.xlarge", GEMMA_E2B_INT4), ("g6e", 1, "g6e.xlarge", GEMMA_E2B_INT4),
        ("g7e", 2, "g7e.2xlarge", "google/gemma-4-E4B-it")]
    assert c.backend("g6").instance_type == "g6.xlarge"  # the backend's own stack keeps its type
    # no model: the backend's model as configured (-c model / <id>_model)
    c = parse({"backends": "g6", "model": GEMMA_E2B, "g6_variants": "g5=@g5.xlarge"})
    assert c.variants[0].model_id == GEMMA_E2B


def test_sagemaker_twin_is_one_endpoint_type():
    c = parse({"backends": "sagemaker", "sagemaker_instance_types": "ml.g6.xlarge,ml.g6e.xlarge",
               "sagemaker_variants": "g7e=@ml.g7e.2xlarge"})
    (v,) = c.variants
    assert (v.instance_type, v.instance_types) == ("ml.g7e.2xlarge", ("ml.g7e.2xlarge",))


def test_error_names_the_item_and_hint_sets_it():
    c = parse({"backends": "g6", "g6_variants": "big=google/gemma-4-31B-it@g6.xlarge"})
    v = c.variants[0]
    assert v.instance_key("ec2") == "g6_variants[big]" and c.backend("g6").instance_key("ec2") == "g6_instance_type"
    assert v.instance_fix("ec2", "g7e.2xlarge") == "in -c g6_variants give big=google/gemma-4-31B-it@g7e.2xlarge"


@pytest.mark.parametrize("value,want", [
    ("g5=@", "g6_variants: variant 'g5' = '@' names no instance type after '@'; e.g. "),
    ("g5=", "g6_variants: variant 'g5' has no model and no instance type; e.g. "),
    (f"g5={GEMMA_E2B}@", f"g6_variants: variant 'g5' = '{GEMMA_E2B}@' names no instance type after '@'"),
    ("g5=a@b@g5.xlarge", "g6_variants: variant 'g5' = 'a@b@g5.xlarge' has more than one '@'"),
    ("g5=@ml.g5.xlarge", "g6_variants[g5]='ml.g5.xlarge': g6 needs an EC2 type without ml., e.g. g6.xlarge"),
    ("g5=@g5g.xlarge", "g6_variants[g5]='g5g.xlarge' is arm64 but the g6 image is x86_64"),
    ("g5=@inf2.xlarge", "g6_variants[g5]='inf2.xlarge': g6 needs an NVIDIA GPU type, e.g. g6.xlarge"),
    ("g5=@g5.99xlarge", "g6_variants[g5]='g5.99xlarge' is not an EC2 instance type botocore"),
    ("g5=@nope", "g6_variants[g5]='nope' is not an instance type (e.g. g6.xlarge)"),
    ("g5=not a repo@g5.xlarge", "g6_variants[g5]='not a repo' is not a Hugging Face model id"),
])
def test_bad_twin_items_are_one_config_line(value, want):
    with pytest.raises(ConfigError) as e:
        parse({"backends": "g6", "g6_variants": value})
    assert str(e.value).startswith(want) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("ctx,want", [
    ({"sagemaker_variants": "g5=@g5.xlarge"}, "sagemaker_variants[g5]='g5.xlarge': sagemaker needs an ml.* SageMaker type"),
    ({"inf2_variants": "big=@trn1.2xlarge"}, None),  # the catalog's Neuron family rule accepts trn1 types
    ({"inf2_variants": "big=@g6.xlarge"}, "inf2_variants[big]='g6.xlarge': inf2 needs an inf2/trn1 type"),
    ({"g6_variants": {"g5": 5}}, "g6_variants: variant 'g5' is 5, not MODEL, MODEL@INSTANCE_TYPE or @INSTANCE_TYPE"),
])
def test_other_backends_apply_their_own_instance_rules(ctx, want):
    if want is None:
        parse({"backends": "inf2", **ctx})
        return
    with pytest.raises(ConfigError) as e:
        parse({"backends": "g6,sagemaker,inf2", **ctx})
    assert str(e.value).startswith(want) and "\n" not in str(e.value), str(e.value)


def test_a_backend_not_selected_still_has_its_items_checked():
    with pytest.raises(ConfigError, match=r"^g5g_variants\[x\]='g6.xlarge' is x86_64"):
        parse({"backends": "g6", "g5g_variants": "x=@g6.xlarge"})
