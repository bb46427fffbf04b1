"""The Neuron boot budget: host memory and readiness window, refused in one line when they cannot fit."""
from __future__ import annotations

import json

import pytest

from ami.neuron.boot_budget import (GIB, HOSTS, Allowances, boot_budget, check_boot_budget, graph_count,
                                    host_memory_bytes)
from ami.neuron.neuron_config import DEFAULT_SHAPES, ConfigError, make_shapes
from kit.catalog import INSTANCES

WINDOW_S = 3300  # the inf2/trn1 readiness window the boot gets (60 min wait condition - 300 s)


def test_host_facts_cover_every_neuron_instance_the_catalog_knows_and_agree_on_vcpus():
    neuron = {n: s for n, s in INSTANCES.items() if s.neuron_cores}
    assert set(neuron) <= set(HOSTS), f"no host memory figure for {set(neuron) - set(HOSTS)}"
    for name, spec in neuron.items():
        assert HOSTS[name][0] == spec.vcpus, name
    assert HOSTS["inf2.xlarge"] == (4, 16)


def test_first_boot_memory_is_the_checkpoint_plus_one_rank_shard_plus_the_baseline():
    allow = Allowances()
    b = boot_budget(10 * 10**9, 2, DEFAULT_SHAPES, "inf2.xlarge", WINDOW_S, allow=allow)
    assert b.host_need_bytes == 10 * 10**9 + 5 * 10**9 + allow.host_baseline_bytes
    assert b.host_bytes == 16 * GIB
    assert b.compile_s == graph_count(DEFAULT_SHAPES) * allow.compile_s_per_graph
    assert graph_count(DEFAULT_SHAPES) == len(DEFAULT_SHAPES.prompt_buckets) + len(DEFAULT_SHAPES.token_buckets)
    check_boot_budget(b)  # fits, barely: 15.0 GiB of 16


def test_a_checkpoint_too_big_for_inf2_xlarge_is_refused_in_one_line():
    b = boot_budget(11.5e9, 2, DEFAULT_SHAPES, "inf2.xlarge", WINDOW_S)
    with pytest.raises(ConfigError) as e:
        check_boot_budget(b)
    msg = str(e.value)
    assert "\n" not in msg and "does not fit" in msg and "inf2.xlarge" in msg and "of 16.0 GiB" in msg
    # The same checkpoint fits trn1.2xlarge's 32 GiB, and a second boot of inf2.xlarge that finds
    # its compiled graphs (no shard held beside the checkpoint).
    check_boot_budget(boot_budget(11.5e9, 2, DEFAULT_SHAPES, "trn1.2xlarge", WINDOW_S))
    cached = check_boot_budget(boot_budget(11.5e9, 2, DEFAULT_SHAPES, "inf2.xlarge", WINDOW_S, cached=True))
    assert cached.compile_s == cached.shard_s == cached.download_s == 0 and "cached" in cached.line()


def test_more_graphs_than_the_window_can_compile_are_refused_naming_the_buckets():
    many = make_shapes((128, 256, 512, 1024, 1536, 2048), 4096, 4, (512, 1024, 2048, 3072, 4096))
    b = boot_budget(10 * 10**9, 2, many, "inf2.xlarge", WINDOW_S)
    assert b.total_s > WINDOW_S
    with pytest.raises(ConfigError, match="does not fit: .*readiness window; fewer --prompt-buckets"):
        check_boot_budget(b)
    # Without a known window only memory is checked.
    check_boot_budget(boot_budget(10 * 10**9, 2, many, "inf2.xlarge", None))


def test_the_allowances_are_stated_and_change_the_verdict():
    slow = Allowances(compile_s_per_graph=900.0)
    b = boot_budget(10 * 10**9, 2, DEFAULT_SHAPES, "inf2.xlarge", WINDOW_S, allow=slow)
    with pytest.raises(ConfigError):
        check_boot_budget(b)
    assert f"compile {graph_count(DEFAULT_SHAPES) * 900:.0f} s" in b.line()


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
