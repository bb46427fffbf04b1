"""The Neuron compile configuration: shapes, tp degree, dtype, embedding split, cache path."""
from __future__ import annotations

import json

import pytest

from ami.neuron.neuron_config import (DEFAULT_SHAPES, MAX_GATHER_BYTES, ConfigError, cache_key,
                                      choose_tp_degree, embedding_tables, make_shapes, parse_neuron_ls, plan)
from kit.catalog import BACKENDS, INSTANCES, neuron_platform, neuron_tp_degrees

# What the stack passes on a 2-NeuronCore instance (inf2.xlarge, trn1.2xlarge): kit/catalog.py.
TWO = (1, 2)

# Gemma 4 E2B's text settings as its config.json nests them (also in harness/cost/architecture.py).
E2B = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": {
    "vocab_size": 262144, "hidden_size": 1536, "num_hidden_layers": 35, "num_attention_heads": 8,
    "num_key_value_heads": 1, "head_dim": 256, "hidden_size_per_layer_input": 256,
    "vocab_size_per_layer_input": 262144, "num_kv_shared_layers": 20}}


def neuron_cores(backend_id: str) -> int:
    return INSTANCES[BACKENDS[backend_id].instance_type].neuron_cores


def test_default_shapes_are_the_documented_ones():
    assert DEFAULT_SHAPES.prompt_buckets == (128, 512, 2048)
    assert DEFAULT_SHAPES.total_tokens == 4096
    assert DEFAULT_SHAPES.token_buckets == (1024, 2048, 4096)
    assert DEFAULT_SHAPES.batch_size == 4 and DEFAULT_SHAPES.max_prompt_tokens == 2048


# Every Neuron row of the catalog, each on its default instance type (2 NeuronCores for inf2 and trn1).
@pytest.mark.parametrize("backend", [b.id for b in BACKENDS.values() if b.engine_kind == "neuron"])
def test_kit_backends_compile_tp2_bf16_with_the_per_layer_table_split_in_two(backend):
    itype = BACKENDS[backend].instance_type
    cfg = plan(E2B, neuron_cores=neuron_cores(backend), tp_degrees=neuron_tp_degrees(itype),
               platform=neuron_platform(itype), sdk_version="2.28.0",
               cache_root="/var/cache/ami-neuron", model_name="google/gemma-4-E2B-it")
    assert cfg.tp_degree == 2 and cfg.dtype == "bf16" and cfg.torch_dtype == "bfloat16"
    assert cfg.embedding_shards == 2
    assert cfg.largest_gather_bytes == 262144 * 35 * 256 * 2 // 2  # 2.35 GB per NeuronCore
    assert cfg.largest_gather_bytes < MAX_GATHER_BYTES
    kw = cfg.neuron_config_kwargs()
    assert kw["tp_degree"] == 2 and kw["batch_size"] == 4 and kw["seq_len"] == 4096
    assert kw["max_context_length"] == 2048 and kw["enable_bucketing"] is True
    assert kw["context_encoding_buckets"] == [128, 512, 2048]
    assert kw["token_generation_buckets"] == [1024, 2048, 4096]
    # sampling on the device, per-row parameters (dynamic), logits beside the tokens for host rows
    assert kw["on_device_sampling_config"] == {"do_sample": True, "dynamic": True, "global_topk": 256,
                                               "deterministic": False}
    assert kw["output_logits"] is True and kw["save_sharded_checkpoint"] is True
    # continuous batching: context encoding one sequence at a time, token generation over 4 slots
    assert kw["is_continuous_batching"] is True and kw["ctx_batch_size"] == 1
    assert kw["tkg_batch_size"] == 4 and kw["max_batch_size"] == 4 and kw["padding_side"] == "right"
    assert cfg.compiled_dir == f"/var/cache/ami-neuron/google_gemma-4-E2B-it-{cfg.cache_key}"


def test_tp1_would_put_the_whole_per_layer_table_in_one_gather_and_is_refused():
    tables = {t.name: t for t in embedding_tables(E2B, 2)}
    assert tables["embed_tokens_per_layer"].bytes == 4_697_620_480  # 262144 x 8960 bf16
    assert tables["embed_tokens"].bytes == 805_306_368
    with pytest.raises(ConfigError, match=r"4\.70 GB per NeuronCore.*at least 2"):
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", tp_degree=1)


@pytest.mark.parametrize("instance, expected", [
    ("inf2.xlarge", 2), ("inf2.8xlarge", 2), ("inf2.24xlarge", 8), ("inf2.48xlarge", 8),
    ("trn1.2xlarge", 2), ("trn1.32xlarge", 8),
])
def test_tp_degree_from_the_catalog_core_count(instance, expected):
    # Largest runtime-supported degree (the catalog's, as the stack passes them) that fits the
    # cores and divides E2B's 8 heads.
    assert choose_tp_degree(INSTANCES[instance].neuron_cores, neuron_tp_degrees(instance), 8) == expected


def test_tp_degree_rules():
    inf2_48, trn1_32 = (1, 2, 4, 8, 24), (1, 2, 8, 16, 32)
    assert choose_tp_degree(24, inf2_48, 48) == 24
    assert choose_tp_degree(24, inf2_48, 12) == 4  # 24 and 8 do not divide 12 heads; inf2 has no 6 or 12
    assert choose_tp_degree(12, inf2_48, 48) == 8  # NEURON_RT_NUM_CORES=12: 24 does not fit
    assert choose_tp_degree(32, trn1_32, 64) == 32
    with pytest.raises(ConfigError, match="no NeuronCores"):
        choose_tp_degree(0, TWO, 8)
    with pytest.raises(ConfigError, match="pass --tp-degree N, or --tp-degrees"):
        plan(E2B, neuron_cores=2)  # nothing passed: the engine does not guess the runtime's degrees
    with pytest.raises(ConfigError, match=r"none of the tp degrees \[2\] .* 3 attention heads"):
        choose_tp_degree(2, (2,), 3)
    with pytest.raises(ConfigError, match=r"not one the Neuron runtime supports on this instance; valid: \[1, 2, 8"):
        plan(E2B, neuron_cores=32, tp_degrees=trn1_32, tp_degree=4)
    with pytest.raises(ConfigError, match="exceeds the 2 NeuronCores"):
        plan(E2B, neuron_cores=2, tp_degree=4)  # a forced degree without --tp-degrees is still checked
    with pytest.raises(ConfigError, match="does not divide the model's 8 attention heads"):
        plan(E2B, neuron_cores=24, tp_degrees=inf2_48, tp_degree=24)


def test_int4_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="27x slower"):
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", dtype="int4")
    qat = {**E2B, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "int"}}}}}
    with pytest.raises(ConfigError, match="int4 checkpoint refused.*27x"):
        plan(qat, neuron_cores=2, tp_degrees=TWO, platform="inf2")
    with pytest.raises(ConfigError, match="not one of bf16, fp16"):
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", dtype="bf17")
    assert plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", dtype="fp16").torch_dtype == "float16"


def test_cache_path_is_stable_and_changes_with_anything_compiled_in():
    base = plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.0")
    assert plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.0").compiled_dir == base.compiled_dir
    other_shapes = make_shapes((128, 512), 1024, 4)
    variants = [
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.1"),
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.0", shapes=other_shapes),
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.0", dtype="fp16"),
        plan({**E2B, "text_config": {**E2B["text_config"], "vocab_size": 262143}},
             neuron_cores=2, tp_degrees=TWO, platform="inf2", sdk_version="2.28.0"),
        plan(E2B, neuron_cores=2, tp_degrees=TWO, platform="trn1", sdk_version="2.28.0"),  # baked on inf2, run on trn1
    ]
    assert len({v.compiled_dir for v in variants} | {base.compiled_dir}) == 6
    assert json.loads(json.dumps(base.marker()))["cache_key"] == base.cache_key
    assert cache_key(E2B, DEFAULT_SHAPES, 2, "bf16", "x") == cache_key(E2B, DEFAULT_SHAPES, 2, "bf16", "x")


@pytest.mark.parametrize("args, message", [
    (((512, 128), 1024, 4), "increasing positive"),
    (((128, 512), 512, 4), "must exceed the largest prompt bucket"),
    (((128,), 1024, 0), "batch size"),
    (((128,), 1024, 4, (256, 512)), "end at the total"),
])
def test_bad_shapes_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        make_shapes(*args)


def test_default_token_buckets_follow_the_total():
    assert make_shapes((64, 256), 512, 2).token_buckets == (256, 512)
    assert make_shapes((128,), 8192, 2).token_buckets == (2048, 4096, 8192)


def test_neuron_ls_core_count():
    out = json.dumps([{"neuron_device": 0, "bdf": "00:1f.0", "nc_count": 2, "memory_size": 34359738368}])
    assert parse_neuron_ls(out) == 2
    two = json.dumps([{"neuron_device": i, "nc_count": 2} for i in range(2)])
    assert parse_neuron_ls(two) == 4
    with pytest.raises(ConfigError, match="cannot read NeuronCore count"):
        parse_neuron_ls("neuron-ls: command not found")


def test_memory_check_counts_weights_per_core_and_a_replicated_kv_cache():
    kinds = ["full_attention" if i % 5 == 4 else "sliding_attention" for i in range(35)]  # 4 sliding : 1 full
    full = {**E2B, "text_config": {**E2B["text_config"], "global_head_dim": 512, "sliding_window": 512,
                                   "layer_types": kinds}}
    # The port's cache: all 35 layers (the 20 KV-shared ones keep their own slots), 28 sliding x 256 +
    # 7 full x 512, 1 KV head (replicated on each core), all at max(512, 4096), batch 4, bf16: 0.70 GB.
    from ami.neuron.neuron_config import kv_cache_bytes
    kv = (28 * 256 + 7 * 512) * 2 * 1 * 4096 * 4 * 2
    assert kv_cache_bytes(full, DEFAULT_SHAPES, 2) == kv == 704_643_072
    # The E2B checkpoint on disk (~10.2 GB with its vision/audio towers) fits at tp 2.
    cfg = plan(full, neuron_cores=2, tp_degrees=TWO, platform="inf2", weight_bytes=10_200_000_000)
    assert cfg.bytes_per_core == 5_100_000_000 + kv
    # A 26B-class checkpoint does not, and says what to change.
    with pytest.raises(ConfigError, match=r"52\.0 GB of weights over tp degree 2.*raise the tp degree"):
        plan(full, neuron_cores=2, tp_degrees=TWO, platform="inf2", weight_bytes=52_000_000_000)


def test_the_checkpoints_commit_is_part_of_the_compiled_cache_key():
    """The compiled folder holds the sharded weights a load reads (save_sharded_checkpoint): a
    different commit with the same config.json must not find it."""
    from ami.neuron.neuron_config import DEFAULT_SHAPES, cache_key

    args = ({"text_config": {"num_hidden_layers": 35}}, DEFAULT_SHAPES, 2, "bf16", "0.8.0", "inf2")
    a, b = "a" * 40, "b" * 40
    assert cache_key(*args, revision=a) == cache_key(*args, revision=a)
    assert cache_key(*args, revision=a) != cache_key(*args, revision=b) != cache_key(*args)
