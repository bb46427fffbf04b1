"""What vLLM 0.30.0 holds after loading a package, term by term (harness/package/resident.py), and
the caching-allocator rules it rests on (harness/package/allocator.py). Hand-worked numbers come
from the vLLM 0.30.0 sources the modules cite; the published totals are tested in test_sizes.py."""
from __future__ import annotations

import copy
import json
from pathlib import Path


from harness.package.allocator import CachingAllocator
from harness.package.resident import MAX_SPLIT_SIZE, Serving, load, rope_caches
from kit.schemes import SCHEMES

MIB = 2**20
CONFIG = json.loads((Path(__file__).parent / "fixtures" / "gemma-4-E2B-it.config.json").read_text())
TEXT = CONFIG["text_config"]


def test_rope_caches_one_per_layer_type_at_full_width():
    # base.py: cache [max_position_embeddings, rotary_dim] in bf16; gemma4_rope.py passes
    # head_size as rotary_dim, so the full-attention cache is 512 wide despite the 0.25 factor.
    assert rope_caches(TEXT) == {"sliding_attention": 131072 * 256 * 2,
                                 "full_attention": 131072 * 512 * 2}


def test_a_partial_default_rope_caches_only_its_rotary_dims():
    text = copy.deepcopy(TEXT)
    text["rope_parameters"]["full_attention"]["rope_type"] = "default"
    assert rope_caches(text)["full_attention"] == 131072 * 128 * 2  # int(512 * 0.25)


def test_layer_types_with_one_rope_key_share_one_cache():
    text = copy.deepcopy(TEXT)
    text["global_head_dim"] = text["head_dim"]
    text["rope_parameters"]["full_attention"] = dict(text["rope_parameters"]["sliding_attention"])
    assert list(rope_caches(text).values()) == [131072 * 256 * 2]


def test_the_load_keeps_the_two_rope_caches():
    assert load(CONFIG, SCHEMES["text"])["rope"] == 131072 * 256 * 2 + 131072 * 512 * 2


def test_runtime_tensors_of_the_load():
    # 211 packed Linears (per_layer_model_projection + 6 per layer) each get a Marlin workspace of
    # one int32 per L4 SM (58); 35 attention layers 4 fp32 kv scales; the 15 non-shared layers a
    # weightless v_norm's ones (12 sliding x 256, 3 full x 512, bf16); four 0-d bf16 buffers.
    expected = 211 * 58 * 4 + 35 * 4 * 4 + (12 * 256 + 3 * 512) * 2 + 4 * 2
    assert load(CONFIG, SCHEMES["text"])["runtime"] == expected


def test_vllm_holds_the_package_bytes_less_merged_shape_tensors():
    from harness.package.sizes import sizes, text_shapes

    files = sizes(text_shapes(CONFIG), SCHEMES["emb4"])["total"]
    # one int64[2] weight_shape per merged qkv_proj (3 in the files, 15 layers) and gate_up_proj
    # (2 in the files, 35 layers): compressed_tensors_wNa16.py create_weights
    assert load(CONFIG, SCHEMES["emb4"])["weight"] == files - 16 * (2 * 15 + 1 * 35)


def test_unsplit_blocks_come_from_vllms_load_time_max_split_size():
    held = load(CONFIG, SCHEMES["emb4"])
    default = load(CONFIG, SCHEMES["emb4"], Serving(max_split_size=None))
    assert 35 * MIB < held["unsplit"] < 37 * MIB
    assert default["unsplit"] < 23 * MIB
    assert round(default["total"] / 2**30, 2) != 2.86  # without it the published figure is missed


def test_small_requests_round_to_512_bytes():
    a = CachingAllocator()
    a.malloc(1)
    a.malloc(600_000)
    assert a.allocated == 512 + 600_064


def test_a_large_request_splits_a_new_20_mib_segment():
    a = CachingAllocator()
    a.malloc(9 * MIB)
    assert a.allocated == 9 * MIB


def test_a_rest_of_at_most_1_mib_stays_in_the_block():
    a = CachingAllocator()
    a.malloc(9 * MIB)
    a.malloc(9 * MIB)  # the 11 MiB rest: split, 2 MiB left free
    a.malloc(3 * MIB // 2)  # takes the 2 MiB block; 0.5 MiB is not split off
    assert a.allocated == 20 * MIB


def test_freed_neighbours_merge():
    a = CachingAllocator()
    x, y = a.malloc(4 * MIB), a.malloc(4 * MIB)
    a.free(x)
    a.free(y)
    a.malloc(13 * MIB)  # fits the merged 20 MiB block and splits it; a new segment would be 14 MiB
    assert a.allocated == 13 * MIB


def test_oversize_blocks_are_not_split_under_max_split_size():
    for limit, expected in ((MAX_SPLIT_SIZE, 60 * MIB), (None, 45 * MIB)):
        a = CachingAllocator(limit)
        a.free(a.malloc(60 * MIB))
        a.malloc(45 * MIB)  # within 20 MiB of the cached 60 MiB block
        assert a.allocated == expected


def test_a_small_request_never_takes_an_oversize_block():
    for limit, reserved in ((MAX_SPLIT_SIZE, 40 * MIB), (None, 20 * MIB)):
        a = CachingAllocator(limit)
        a.free(a.malloc(9 * MIB))  # the whole 20 MiB segment is free again
        a.malloc(9 * MIB)  # under max_split_size that block is oversize: a new segment
        assert (a.allocated, a.reserved) == (9 * MIB, reserved)


def test_the_addition_is_the_same_for_each_scheme():
    added = [load(CONFIG, SCHEMES[n]) for n in ("text", "ple4", "emb4")]
    added = [r["total"] - r["weight"] for r in added]
    assert max(added) - min(added) < MIB // 100
