"""Roofline: bytes per token, chip bandwidth from the catalog, ceiling, efficiency, widening warnings."""
from __future__ import annotations

import pytest

from harness import catalog
from harness.cost.plan import seed_reference
from harness.cost.roofline import backend_roofline, roofline
from harness.models import GEMMA_4_E2B


def test_ceiling_is_bandwidth_over_bytes_per_token():
    r = roofline("g5g.2xlarge", catalog.GEMMA_E2B, "fp16", context_tokens=0)
    assert r.bytes_per_token == GEMMA_4_E2B.weights_read_per_token("fp16", "fp16")
    assert r.ceiling_tok_s == pytest.approx(320e9 / r.bytes_per_token)
    assert r.ceiling_tok_s_measured_bw == pytest.approx(277e9 / r.bytes_per_token)
    assert r.warnings == ()


def test_kv_cache_lowers_the_ceiling():
    short = roofline("g6.xlarge", catalog.GEMMA_E2B, "bf16", context_tokens=128)
    long = roofline("g6.xlarge", catalog.GEMMA_E2B, "bf16", context_tokens=32_768)
    assert long.kv_bytes_per_token > short.kv_bytes_per_token
    assert long.ceiling_tok_s < short.ceiling_tok_s


@pytest.mark.parametrize("inst", ["g6.xlarge", "g5g.2xlarge", "inf2.xlarge", "trn1.2xlarge"])
def test_int4_is_flagged_widened_on_l4_t4g_and_neuron(inst):
    r = roofline(inst, catalog.GEMMA_E2B_INT4, "int4")
    assert r.support == "widened16" and r.warnings
    assert r.ceiling_tok_s_widened < r.ceiling_tok_s
    if inst.startswith(("inf2", "trn1")):
        assert "27x" in r.warnings[0]


def test_native_precision_has_no_warning_and_blackwell_int4_is_native():
    assert roofline("g6.xlarge", catalog.GEMMA_E2B, "fp8").warnings == ()
    assert roofline("ml.g7e.12xlarge", catalog.GEMMA_E2B_INT4, "int4").warnings == ()
    assert "emulated" in roofline("g5g.2xlarge", catalog.GEMMA_E2B, "bf16").warnings[0]


def test_efficiency_of_the_seed_measurements():
    seeds = seed_reference()["backends"]
    eff = {b: backend_roofline(b).efficiency(seeds[b]["single_stream_tok_s"]) for b in seeds}
    assert all(0 < e < 1 for e in eff.values())
    # The seed's point: Neuron has 2-2.7x L4's bandwidth and uses far less of it.
    assert eff["inf2"] < eff["g6"] / 2 and eff["trn1"] < eff["g6"] / 2
    assert backend_roofline("bedrock") is None


def test_unknown_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="no bandwidth known"):
        roofline("x9.metal", catalog.GEMMA_E2B, "bf16")
    with pytest.raises(ValueError, match="no architecture known"):
        roofline("g6.xlarge", "meta/llama", "bf16")
