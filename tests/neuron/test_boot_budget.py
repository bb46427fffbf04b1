"""The Neuron boot budget: host memory and readiness window, refused in one line when they cannot fit."""
from __future__ import annotations

import json
import struct

import pytest

from ami.neuron.boot_budget import (GIB, HOSTS, Allowances, Checkpoint, boot_budget, check_boot_budget, graph_count,
                                    host_memory_bytes, read_checkpoint)
from ami.neuron.neuron_config import DEFAULT_SHAPES, ConfigError, kv_cache_bytes, make_shapes
from kit import models as km
from kit.catalog import INSTANCES

WINDOW_S = 3300  # the inf2/trn1 readiness window the boot gets (60 min wait condition - 300 s)


def test_host_facts_cover_every_neuron_instance_the_catalog_knows_and_agree_on_vcpus():
    neuron = {n: s for n, s in INSTANCES.items() if s.neuron_cores}
    assert set(neuron) <= set(HOSTS), f"no host memory figure for {set(neuron) - set(HOSTS)}"
    for name, spec in neuron.items():
        assert HOSTS[name][0] == spec.vcpus, name
    assert HOSTS["inf2.xlarge"] == (4, 16)


# Gemma 4 E2B as the kit sizes it: the bf16 checkpoint on disk ~10.2 GB (5.1 B parameters with
# the vision and audio towers), of which the text model the port keeps 9,257,138,688 bytes
# (kit/models.py, checked against transformers' own module), the tied embedding 262144 x 1536 x 2.
E2B_DISK = 10_200_000_000
E2B_TEXT = int(km.GEMMA_4_E2B.weights_bytes("bf16"))
E2B_EMBED = 262144 * 1536 * 2
E2B = Checkpoint(E2B_DISK, E2B_TEXT, E2B_EMBED)
E2B_KV = kv_cache_bytes({"text_config": km.TEXT_CONFIGS["E2B"]}, DEFAULT_SHAPES, 2)  # 0.70 GB, the port's
MEMTOTAL_INF2_XLARGE = 15_896_060 * 1024  # an inf2.xlarge's /proc/meminfo MemTotal


def test_the_compile_models_each_copy_the_converter_and_nxd_make():
    assert (E2B_TEXT, E2B_EMBED, E2B_KV) == (9_257_138_688, 805_306_368, 704_643_072)
    allow = Allowances()
    b = boot_budget(E2B, 2, DEFAULT_SHAPES, "inf2.8xlarge", WINDOW_S, allow=allow, kv_bytes=E2B_KV)
    m = b.memory
    per_rank = (E2B_TEXT + E2B_EMBED) // 2  # embedding and output head both sharded over tp 2
    assert m.checkpoint == E2B_DISK  # every safetensors file, towers included
    assert m.converter_clones == E2B_TEXT  # weight.detach().clone() of every text tensor
    assert m.tied_clones == 2 * E2B_EMBED  # lm_head.weight and lm_head.linear.weight
    assert m.rank_shard == per_rank  # one rank's contiguous copy for save_file
    assert m.traced_module == per_rank + E2B_KV  # the token-generation model kept by the builder
    assert m.compiler == graph_count(DEFAULT_SHAPES) * allow.compiler_bytes_per_graph  # all graphs at once
    assert m.phases == {"compiling": 2 * (per_rank + E2B_KV) + 6 * GIB,
                        "converting": E2B_DISK + E2B_TEXT + per_rank + E2B_KV,
                        "sharding": E2B_TEXT + 2 * E2B_EMBED + per_rank + per_rank + E2B_KV}
    # The raw checkpoint and its clones together, with the kept module: 24.5 GiB.
    assert m.peak_phase == "converting"
    assert b.host_need_bytes == E2B_DISK + E2B_TEXT + per_rank + E2B_KV + GIB
    assert round(b.host_need_bytes / GIB, 1) == 24.5
    # What the budget counted before (checkpoint + one rank's shard + 1 GiB) is 9 GiB short of it.
    assert round((E2B_DISK + E2B_DISK // 2 + GIB) / GIB, 2) == 15.25


def test_the_chosen_build_host_fits_the_e2b_compile_with_a_margin():
    from kit.image_facts import BUILD_HOSTS, NEURON_BUILD_HOST

    assert BUILD_HOSTS["neuron"]["build"] == (NEURON_BUILD_HOST,) == ("inf2.8xlarge",)
    b = check_boot_budget(boot_budget(E2B, 2, DEFAULT_SHAPES, NEURON_BUILD_HOST, WINDOW_S, kv_bytes=E2B_KV))
    # 128 GiB less the kernel's 6%: 120.3 GiB, 95.9 GiB to spare.
    assert b.host_bytes == int(128 * GIB * 0.94) and b.margin_bytes > 90 * GIB
    assert "margin 95.9 GiB" in b.line()
    # trn1.2xlarge compiles its own graphs (another platform) on its first boot: it fits its 32 GiB too.
    trn1 = check_boot_budget(boot_budget(E2B, 2, DEFAULT_SHAPES, "trn1.2xlarge", WINDOW_S, kv_bytes=E2B_KV))
    assert 5 * GIB < trn1.margin_bytes < 6 * GIB


@pytest.mark.parametrize("host", ["inf2.xlarge", MEMTOTAL_INF2_XLARGE])
def test_the_old_build_host_inf2_xlarge_without_swap_cannot_compile_e2b(host):
    b = boot_budget(E2B, 2, DEFAULT_SHAPES, host, WINDOW_S, kv_bytes=E2B_KV)
    with pytest.raises(ConfigError) as e:
        check_boot_budget(b)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("does not fit: ")
    assert ("host memory >= 24.5 GiB (peak while converting: checkpoint 9.5 + converter clones 8.6 + "
            "traced module 5.3 + baseline 1.0 GiB) of 15.") in msg
    assert "margin -9." in msg and "the Neuron image compiles on inf2.8xlarge" in msg
    # Its second boot, or a boot of an image carrying the graphs, loads the saved shards only.
    cached = check_boot_budget(boot_budget(E2B, 2, DEFAULT_SHAPES, host, WINDOW_S, cached=True))
    assert cached.host_need_bytes == E2B_DISK + GIB and cached.memory is None
    assert cached.compile_s == cached.shard_s == cached.download_s == 0 and "cached" in cached.line()


def test_only_the_disk_size_known_counts_it_all_as_text():
    b = boot_budget(E2B_DISK, 2, DEFAULT_SHAPES, "trn1.2xlarge", WINDOW_S)
    assert b.memory.converter_clones == b.memory.checkpoint == E2B_DISK and b.memory.tied_clones == 0


def _safetensors(path, tensors: dict[str, int]) -> None:
    """A file with a real safetensors header (8-byte length, JSON) and the tensors' bytes as zeros."""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [at, at + size]}
        at += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(at))


def test_the_checkpoint_sizes_come_from_the_headers_as_the_converter_sorts_them(tmp_path):
    _safetensors(tmp_path / "model-00001-of-00002.safetensors", {
        "model.language_model.embed_tokens.weight": 1000,
        "model.language_model.embed_tokens_per_layer.weight": 3000,
        "model.language_model.layers.0.self_attn.q_proj.weight": 200,
        "model.vision_tower.encoder.layers.0.weight": 70})
    _safetensors(tmp_path / "model-00002-of-00002.safetensors", {
        "model.audio_tower.layers.0.weight": 50, "model.embed_vision.embedding_projection.weight": 6,
        "model.embed_audio.embedding_projection.weight": 4, "model.language_model.norm.weight": 10})
    assert read_checkpoint(str(tmp_path)) == Checkpoint(total=4340, text=4210, tied_embedding=1000)
    assert read_checkpoint(str(tmp_path), tied=False) == Checkpoint(4340, 4210, 0)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\x05")  # cut short
    assert read_checkpoint(str(tmp_path)) is None
    assert read_checkpoint(str(tmp_path / "empty")) is None


def test_more_graphs_than_the_window_can_compile_are_refused_naming_the_buckets():
    many = make_shapes((128, 256, 512, 1024, 1536, 2048), 4096, 4, (512, 1024, 2048, 3072, 4096))
    b = boot_budget(E2B, 2, many, "inf2.8xlarge", WINDOW_S, kv_bytes=E2B_KV)
    assert b.total_s > WINDOW_S
    with pytest.raises(ConfigError, match="does not fit: .*readiness window; fewer --prompt-buckets"):
        check_boot_budget(b)
    # Without a known window only memory is checked.
    check_boot_budget(boot_budget(E2B, 2, many, "inf2.8xlarge", None, kv_bytes=E2B_KV))


def test_the_allowances_are_stated_and_change_the_verdict():
    slow = Allowances(compile_s_per_graph=900.0)
    b = boot_budget(E2B, 2, DEFAULT_SHAPES, "inf2.8xlarge", WINDOW_S, allow=slow, kv_bytes=E2B_KV)
    with pytest.raises(ConfigError, match="readiness window"):
        check_boot_budget(b)
    assert f"compile {graph_count(DEFAULT_SHAPES) * 900:.0f} s" in b.line()
    # The compiler's memory per graph is one too: at 12 GiB a graph the trn1.2xlarge's own compile
    # no longer fits (six graphs at once), and the line says the compiling phase is the peak.
    big = boot_budget(E2B, 2, DEFAULT_SHAPES, "trn1.2xlarge", WINDOW_S, kv_bytes=E2B_KV,
                      allow=Allowances(compiler_bytes_per_graph=12 * GIB))
    with pytest.raises(ConfigError, match=r"peak while compiling: traced module 5\.3 \+ traced module 5\.3 "
                                          r"\+ compiler 72\.0 \+ baseline 1\.0 GiB"):
        check_boot_budget(big)


@pytest.mark.parametrize("args,needle", [
    ((10 * 10**9, 2, DEFAULT_SHAPES, "inf2.medium"), "no host memory figure for 'inf2.medium'"),
    ((0, 2, DEFAULT_SHAPES, "inf2.xlarge"), "must be positive"),
    ((10 * 10**9, 0, DEFAULT_SHAPES, "inf2.xlarge"), "must be positive"),
])
def test_bad_input_is_one_line(args, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        boot_budget(*args)
    assert "\n" not in str(e.value)


def test_is_compiled_needs_the_marker_with_this_cache_key(tmp_path):
    from ami.neuron import neuron_generator
    from ami.neuron.neuron_config import plan

    config = {"text_config": {"num_attention_heads": 8, "vocab_size": 1000, "hidden_size": 64,
                              "num_hidden_layers": 2}}
    cfg = plan(config, neuron_cores=2, tp_degrees=(1, 2), platform="inf2", cache_root=str(tmp_path))
    assert not neuron_generator.is_compiled(cfg)
    (tmp_path / cfg.compiled_dir.rsplit("/", 1)[1]).mkdir()
    marker = tmp_path / cfg.compiled_dir.rsplit("/", 1)[1] / neuron_generator.MARKER
    marker.write_text(json.dumps({"cache_key": "other"}))
    assert not neuron_generator.is_compiled(cfg)
    marker.write_text(json.dumps(cfg.marker()))
    assert neuron_generator.is_compiled(cfg)


def test_on_the_instance_the_kernels_memtotal_is_the_host(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       15896060 kB\nMemFree:        1 kB\n")
    host = host_memory_bytes(str(meminfo))
    assert host == 15896060 * 1024
    b = boot_budget(10 * 10**9, 2, DEFAULT_SHAPES, host, WINDOW_S)
    assert b.host == "this host" and "of 15.2 GiB" in b.line()
    assert host_memory_bytes(str(tmp_path / "missing")) is None
