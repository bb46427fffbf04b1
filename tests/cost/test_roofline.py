"""Roofline: ceiling = chip bandwidth / bytes one generated token reads, against numbers worked out
by hand here from Gemma 4 E2B's config (not from the code under test).

Gemma 4 E2B text model (google/gemma-4-E2B-it config.json, text_config), counted by transformers
5.23's Gemma4TextModel on the meta device (tests/cost/test_architecture.py checks the kit agrees):

    all text parameters          4,628,569,344
    PLE table   262,144 x 35 x 256  = 2,348,810,240   (only looked up: one row per layer per token)
    embedding   262,144 x 1,536     =   402,653,184   (tied: read whole as the LM head)
    decoder + PLE projection        = 4,628,569,344 - 2,348,810,240 - 402,653,184 = 1,877,105,920
    looked-up rows per token        = 1,536 + 35 x 256 = 10,496 values

KV cache read per token at 512 tokens of context (1 KV head; K and V; 2 bytes a value):
    28 sliding layers x 2 x 512 x 256 x 2 = 14,680,064
     7 full layers    x 2 x 512 x 512 x 2 =  7,340,032   -> 22,020,096 bytes

Peak bandwidths (kit/catalog.py): L4 (g6.xlarge) 300 GB/s, T4G (g5g.2xlarge) 320 GB/s
(277 GB/s measured), Inferentia2 (inf2.xlarge) 817 GB/s.
"""
from __future__ import annotations

import pytest

from kit import catalog
from harness.cost.breakeven import seed_reference
from harness.cost.roofline import backend_roofline, roofline

DENSE = 1_877_105_920  # decoder + PLE projection
HEAD = 402_653_184  # tied embedding matrix, read whole for the logits
LOOKUPS = 10_496
KV_512 = 22_020_096


def test_fp16_ceiling_on_t4g_without_context():
    # 2 bytes per weight for everything read: (1,877,105,920 + 402,653,184 + 10,496) x 2
    bytes_per_token = 4_559_539_200
    r = roofline("g5g.2xlarge", catalog.GEMMA_E2B, "fp16", context_tokens=0)
    assert r.bytes_per_token == bytes_per_token == (DENSE + HEAD + LOOKUPS) * 2
    assert r.ceiling_tok_s == pytest.approx(320e9 / bytes_per_token) == pytest.approx(70.18, abs=0.01)
    assert r.ceiling_tok_s_measured_bw == pytest.approx(60.75, abs=0.01)  # 277e9 / 4,559,539,200
    assert r.warnings == ()


def test_int4_ceiling_on_l4_counts_group_scales_16bit_head_and_kv():
    # w4a16, group 128: 0.5 byte + one 16-bit scale per 128 weights = 0.515625 byte per weight;
    # the tied head and the looked-up rows stay bf16.
    weights = 967_882_740 + 805_306_368 + 20_992  # DENSE x 0.515625, HEAD x 2, LOOKUPS x 2
    r = roofline("g6.xlarge", catalog.GEMMA_E2B_INT4, "int4", context_tokens=512)
    assert r.weight_bytes_per_token == weights == 1_773_210_100
    assert r.kv_bytes_per_token == KV_512
    assert r.ceiling_tok_s == pytest.approx(167.11, abs=0.01)  # 300e9 / 1,795,230,196
    # L4 widens int4 to 16 bits before every matmul: if the 16-bit copy is what is read,
    # 300e9 / ((DENSE + HEAD + LOOKUPS) x 2 + KV_512) = 300e9 / 4,581,559,296
    assert r.support == "widened16"
    assert r.ceiling_tok_s_widened == pytest.approx(65.48, abs=0.01)
    assert "65 tok/s" in r.warnings[0]


def test_longer_context_reads_more_kv_only_on_full_attention_layers():
    short = roofline("g6.xlarge", catalog.GEMMA_E2B, "bf16", context_tokens=512)
    long = roofline("g6.xlarge", catalog.GEMMA_E2B, "bf16", context_tokens=1024)
    # past the 512-token window only the 7 full layers read more: 7 x 2 x 512 x 512 x 2 bytes
    assert long.kv_bytes_per_token - short.kv_bytes_per_token == 7_340_032
    assert long.weight_bytes_per_token == short.weight_bytes_per_token
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
    # g6: 131.9 tok/s against 167.11; inf2 (bf16): 36.5 against 817e9 / 4,581,559,296 = 178.98
    assert backend_roofline("g6").efficiency(seeds["g6"]["single_stream_tok_s"]) == pytest.approx(131.9 / 167.11, abs=1e-3)
    assert backend_roofline("inf2").efficiency(seeds["inf2"]["single_stream_tok_s"]) == pytest.approx(36.5 / 178.98, abs=1e-3)
    assert backend_roofline("g6").efficiency(None) is None and backend_roofline("g6").efficiency(0) is None
    assert backend_roofline("bedrock") is None  # model and hardware undisclosed


def test_unknown_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="no bandwidth known"):
        roofline("x9.metal", catalog.GEMMA_E2B, "bf16")
    with pytest.raises(ValueError, match="no architecture known"):
        roofline("g6.xlarge", "meta/llama", "bf16")
