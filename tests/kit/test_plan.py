"""The planner (kit/fit.py) against numbers worked by hand from the published configs.

Counts used below (kit/models.py, each equal to transformers' own module, tests/kit/test_models.py):
E2B 4,628,569,344 text parameters, of which the per-layer table 262144 x 35 x 256 = 2,348,810,240
and the tied embedding 262144 x 1536 = 402,653,184; 31B 30,697,345,280, embedding 262144 x 5376.
"""
from __future__ import annotations

import pytest

from ami.neuron import neuron_config as neuron_engine
from kit import catalog
from kit import models as km
from kit import fit as kp

GIB = 2**30


def test_e2b_on_g6_xlarge():
    choice = kp.choose_model("E2B")
    p = kp.place(catalog.backend("g6"), catalog.INSTANCES["g6.xlarge"], choice, 4096, 1)
    weights = 4_628_569_344 * 2
    # 15 layers own a cache (35 - 20 shared): 12 sliding (window 512, 1 KV head x 256) + 3 full (4096, 1 x 512).
    kv = 12 * 2 * 512 * 256 * 2 + 3 * 2 * 4096 * 512 * 2
    assert (p.weights_bytes, p.kv_bytes, p.tp) == (weights, kv, 1)
    assert p.per_device_bytes == weights + kv + 2 * GIB == 11_436_079_616
    assert p.per_device_budget == 0.9 * 24e9 and p.fits and p.deployable
    # A token reads the decoder + PLE projection (4,628,569,344 - 2,348,810,240 - 402,653,184) and the
    # tied head at 2 bytes, one row of each table, and K/V of all 35 layers (28 sliding, 7 full).
    read = (1_877_105_920 + 402_653_184) * 2 + (1536 + 35 * 256) * 2 + 28 * 2 * 512 * 256 * 2 + 7 * 2 * 4096 * 512 * 2
    assert p.bytes_read_per_token == read == 4_632_939_520
    assert p.ceiling_tok_s == pytest.approx(300e9 / read) == pytest.approx(64.75, abs=0.01)


def test_e2b_int4_ceiling_is_above_the_seeds_measured_speed():
    choice = kp.choose_model("google/gemma-4-E2B-it-qat-w4a16-ct")
    p = kp.place(catalog.backend("g6"), catalog.INSTANCES["g6.xlarge"], choice, 4096, 1)
    # int4 linears (0.5 byte + a 2-byte scale per 128), 16-bit head: 1,877,105,920 x 0.515625 + ...
    read = 1_877_105_920 * 0.515625 + 402_653_184 * 2 + (1536 + 35 * 256) * 2 + 73_400_320
    assert p.ceiling_tok_s == pytest.approx(300e9 / read) == pytest.approx(162.46, abs=0.01)
    assert p.ceiling_tok_s > 131.9  # the seed's measured g6 speed is 81% of it


def test_31b_on_g6e_12xlarge():
    choice = kp.choose_model("31B")
    p = kp.place(catalog.backend("g6"), catalog.INSTANCES["g6e.12xlarge"], choice, 4096, 1)
    weights = 30_697_345_280 * 2
    assert p.tp == 4  # 32 heads, 16 and 4 KV heads: 4 divides all
    # Per GPU: 50 sliding layers x 2 x 1024 x (16/4) x 256 x 2 + 10 full x 2 x 4096 x (4/4) x 512 x 2.
    kv_gpu = 50 * 2 * 1024 * 4 * 256 * 2 + 10 * 2 * 4096 * 1 * 512 * 2
    assert p.per_device_bytes == weights / 4 + kv_gpu + 2 * GIB == 17_789_757_568
    assert p.per_device_budget == pytest.approx(0.9 * 48e9) and p.deployable
    read = (30_697_345_280 - 262144 * 5376) * 2 + 262144 * 5376 * 2 + 5376 * 2 \
        + 50 * 2 * 1024 * 16 * 256 * 2 + 10 * 2 * 4096 * 4 * 512 * 2
    assert p.bytes_read_per_token == read == 62_569_106_432
    assert p.ceiling_tok_s == pytest.approx(4 * 864e9 / read) == pytest.approx(55.23, abs=0.01)


def test_31b_refuses_one_l4_with_its_numbers():
    p = kp.place(catalog.backend("g6"), catalog.INSTANCES["g6.xlarge"], kp.choose_model("31B"), 4096, 1)
    assert not p.fits and "61.4 GB weights / TP 1" in p.reason and "> 21.6 GB" in p.reason


def test_e2b_on_inf2_xlarge_follows_the_neuron_engine():
    p = kp.place(catalog.backend("inf2"), catalog.INSTANCES["inf2.xlarge"], kp.choose_model("E2B"), 4096, 1)
    assert p.tp == 2  # the catalog's inf2 degrees up to 2 cores that divide 8 heads
    # The port's K/V cache: all 35 layers (KV-shared ones too) at the uniform length 4096, 28 sliding
    # x 256 + 7 full x 512 wide, 1 KV head (replicated), K and V, batch 1, 2 bytes.
    kv = (28 * 256 + 7 * 512) * 2 * 1 * 4096 * 1 * 2
    assert kv == 176_160_768 and p.kv_bytes == kv
    assert p.per_device_bytes == 9_257_138_688 / 2 + kv == 4_804_730_112
    assert p.per_device_budget == pytest.approx(0.85 * 16 * GIB)
    assert "4.7 GB split 2 ways = 2.3 GB per gather" in p.reason  # the 262144 x 8960 per-layer table
    # One decode step reads the weights (4,559,539,200 bytes) and the sequence's whole cache: the
    # port reads every layer at the compiled length, whatever the token bucket.
    assert p.bytes_read_per_token == 4_559_539_200 + kv
    assert p.ceiling_tok_s == pytest.approx(817e9 / 4_735_699_968) == pytest.approx(172.52, abs=0.01)


def test_the_neuron_kv_cache_at_the_kits_shapes_is_0_70_gb_per_core():
    """Batch 4 at 4096 tokens (the compiled shapes at max_model_len 4096): 0.70 GB per NeuronCore,
    the engine's figure and the planner's alike; the smallest context still allocates the
    sliding window (512) for every layer."""
    cfg = {"text_config": km.TEXT_CONFIGS["E2B"]}
    shapes = neuron_engine.make_shapes((128, 512, 2048), 4096, 4)
    assert neuron_engine.kv_cache_bytes(cfg, shapes, 2) == 704_643_072
    p = kp.place(catalog.backend("inf2"), catalog.INSTANCES["inf2.xlarge"], kp.choose_model("E2B"), 4096, 4)
    assert p.kv_bytes == 704_643_072
    short = neuron_engine.make_shapes((128,), 256, 1)
    assert neuron_engine.kv_cache_bytes(cfg, short, 2) == (28 * 256 + 7 * 512) * 2 * 512 * 2


def test_neuron_refuses_int4_and_sizes_without_a_port():
    int4 = kp.place(catalog.backend("inf2"), catalog.INSTANCES["inf2.xlarge"],
                    kp.choose_model("google/gemma-4-E2B-it-qat-w4a16-ct"), 4096, 1)
    assert not int4.fits and "int4" in int4.reason
    moe = kp.place(catalog.backend("inf2"), catalog.INSTANCES["inf2.48xlarge"], kp.choose_model("26B"), 4096, 1)
    assert moe.fits and not moe.deployable and "no public Neuron port" in moe.warnings[-1]


@pytest.mark.parametrize("size,instance,context,batch", [
    ("E2B", "inf2.xlarge", 4096, 1), ("E2B", "inf2.xlarge", 4096, 4), ("E2B", "trn1.2xlarge", 2048, 1),
    ("31B", "inf2.48xlarge", 4096, 1), ("31B", "trn1.32xlarge", 4096, 1), ("26B-A4B", "inf2.24xlarge", 4096, 2),
    ("E4B", "inf2.xlarge", 8192, 4), ("12B", "inf2.8xlarge", 4096, 1)])
def test_neuron_rules_agree_with_the_engine(size, instance, context, batch):
    """kit/fit.py restates ami/neuron/neuron_config.py's rules (the core cannot import the
    engine): the same degree, bytes per NeuronCore and refusals, case by case."""
    from kit.models import TEXT_CONFIGS

    p = kp.place(catalog.backend("inf2"), catalog.INSTANCES[instance], kp.choose_model(size), context, batch)
    cfg = {"text_config": dict(TEXT_CONFIGS[size])}
    shapes = neuron_engine.make_shapes((128, 512, 2048) if context > 2048 else (128, 512), context, batch)
    assert (kp.NEURON_HBM_PER_CORE_BYTES, kp.NEURON_HBM_USABLE, kp.NEURON_MAX_GATHER_BYTES) == \
        (neuron_engine.HBM_PER_CORE_BYTES, neuron_engine.HBM_USABLE, neuron_engine.MAX_GATHER_BYTES)
    assert p.kv_bytes == neuron_engine.kv_cache_bytes(cfg, shapes, 2)
    try:
        e = neuron_engine.plan(cfg, neuron_cores=catalog.INSTANCES[instance].neuron_cores,
                               tp_degrees=catalog.neuron_tp_degrees(instance), shapes=shapes,
                               weight_bytes=int(p.weights_bytes))
    except neuron_engine.ConfigError:
        assert not p.fits
    else:
        assert p.fits and (p.tp, p.per_device_bytes) == (e.tp_degree, e.bytes_per_core)


def test_moe_needs_all_experts_in_memory_but_reads_eight():
    p = kp.place(catalog.backend("g6"), catalog.INSTANCES["g7e.2xlarge"], kp.choose_model("26B-A4B"), 4096, 1)
    assert p.weights_bytes == 25_233_141_760 * 2
    assert p.bytes_read_per_token < 8e9 < p.weights_bytes / 6


def test_deploy_check_names_the_smallest_type_that_fits():
    with pytest.raises(kp.PlanError, match=r"does not fit g6\.xlarge: 61\.4 GB.*smallest g6 type that fits: "
                                           r"g7e\.2xlarge \(TP 1\)"):
        kp.check_deploy("g6", "g6.xlarge", "google/gemma-4-31B-it", 4096)
    ok = kp.check_deploy("g6", "g6e.12xlarge", "google/gemma-4-31B-it", 4096)
    assert ok.tp == 4 and ok.volume_extra_gib > 60 and ok.readiness_extra_minutes > 10
    assert kp.check_deploy("g6", "g6.xlarge", "Qwen/Qwen3-Coder-30B-A3B-Instruct", 4096) is None  # not a size we know


@pytest.mark.parametrize("spec,precision,context,concurrency,match", [
    ("40B", None, 4096, 1, "not a Gemma 4 size"), ("E2B", "int3", 4096, 1, "--precision 'int3'"),
    ("E2B", None, 200_000, 1, "exceeds Gemma 4 E2B's 131072"), ("E2B", None, 4096, 0, "--concurrency 0")])
def test_bad_input_is_one_line(spec, precision, context, concurrency, match):
    with pytest.raises(kp.PlanError, match=match):
        kp.plan(kp.choose_model(spec, precision), context=context, concurrency=concurrency)
