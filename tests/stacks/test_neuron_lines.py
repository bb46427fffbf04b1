"""The Neuron SDK lines the kit builds (kit/pins.py) against what upstream says of them (kit/neuron_facts.py)."""
from __future__ import annotations

import pytest

from kit import neuron_facts as facts
from kit import pins


def test_every_fact_names_its_source():
    for row in facts.SDK_LINES.values():
        assert row.sources
        for s in row.sources:
            assert s.repo in (facts.SDK_REPO, facts.NXDI_REPO) and s.path and s.ref and len(s.quote) > 10, (row.line, s)
    for r in facts.PORT_REPORTS:
        assert r.source.ref.startswith(("refs/pull/106/head", "refs/pull/115/head")) and r.source.quote, r
    assert facts.INF2_SETTINGS_SOURCE.quote and all(s.quote for s in facts.TRANSFORMERS_SOURCES)


def test_the_default_line_is_one_whose_nxd_inference_runs_on_inf2_and_trn1():
    facts.check_default_line(pins.NEURON_DEFAULT_LINE)
    assert pins.NEURON_DEFAULT_LINE == "2.28"
    # ... and the one Gemma 4 port that ran on inf2 did so on it.
    (inf2,) = facts.reports(pins.NEURON_DEFAULT_LINE, "inf2")
    assert inf2.status == "VALIDATED"


@pytest.mark.parametrize("line", ["2.29", "2.30", "2.31"])
def test_a_later_line_as_default_is_refused(line, monkeypatch):
    monkeypatch.setattr(pins, "NEURON_DEFAULT_LINE", line)
    with pytest.raises(ValueError) as e:
        facts.check_default_line(pins.NEURON_DEFAULT_LINE)
    msg = str(e.value)
    assert "\n" not in msg and line in msg and "inf2" in msg and "trn1" in msg and "aws-neuron/aws-neuron-sdk" in msg


def test_an_unrecorded_line_is_refused():
    with pytest.raises(ValueError, match="no recorded facts"):
        facts.check_default_line("2.27")


@pytest.mark.parametrize("line", list(pins.NEURON_LINES))
def test_each_built_line_pins_what_its_release_ships(line):
    built, recorded = pins.neuron_line(line), facts.SDK_LINES[line]
    assert built.pip["neuronx-distributed-inference"] == recorded.nxdi
    assert built.pip["neuronx-cc"] == recorded.neuronx_cc
    assert built.sdk.startswith(line + ".")
    # NxD Inference's transformers pin holds: one resolver call, no override.
    (tf,) = [s for s in built.engine_pip if s.startswith("transformers==")]
    assert tf == f"transformers=={facts.TRANSFORMERS_CHOICE}"
    assert recorded.transformers == "==4.57.*" and facts.TRANSFORMERS_CHOICE.startswith("4.57.")
    # Each line builds its own image: an SSM parameter and a stack of its own (kit/image_facts.py).
    assert built.image
    assert (built.parent_ami_name is None) != (built.parent_parameter is None)


def test_lines_build_separate_images_and_say_what_upstream_supports():
    images = [pins.neuron_line(ln).image for ln in pins.NEURON_LINES]
    assert len(set(images)) == len(images)
    assert "for trying" in pins.neuron_line("2.31").status and "not supported upstream on inf2/trn1" in pins.neuron_line("2.31").status
    assert not facts.nxdi_supports("2.31", "inf2") and not facts.nxdi_supports("2.31", "trn1")


def test_an_unknown_line_is_one_line_naming_the_valid_ones():
    with pytest.raises(ValueError) as e:
        pins.neuron_line("2.30")
    assert str(e.value) == "neuron_sdk='2.30' is not a Neuron SDK line the kit builds; valid: 2.28, 2.31"


def test_the_kit_compiles_with_the_validated_inf2_settings():
    from ami.neuron.neuron_config import DEFAULT_SHAPES, NeuronEngineConfig

    cfg = NeuronEngineConfig(DEFAULT_SHAPES, 2, "bf16", 2, 1, "/tmp/x", "k")
    kwargs = cfg.neuron_config_kwargs()
    assert kwargs["attn_kernel_enabled"] is facts.INF2_SETTINGS["attn_kernel_enabled"]
    assert kwargs["fused_qkv"] is facts.INF2_SETTINGS["fused_qkv"]
