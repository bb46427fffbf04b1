"""The Neuron image compiles on an inf2.8xlarge the graphs an inf2.xlarge boot loads: why they stay
valid there, shown on the kit's own facts.

The host memory is the reason for the bigger host (tests/neuron/test_boot_budget.py: E2B's compile
peaks near 24.5 GiB, over an inf2.xlarge's 16 GiB). What must not change with the host is everything
compiled into the graphs or keyed into their cache: the platform the compiler targets (inf2: the
instance family, not its size), the NeuronCores and tensor-parallel degrees the engine plans with,
the shapes the planner gives, LNC 1, and so the engine's cache key.
"""
from __future__ import annotations

import json
from pathlib import Path

from ami.neuron import neuron_config as engine
from kit import catalog
from kit.image_facts import BUILD_HOSTS, NEURON_BUILD_HOST, NEURON_IMAGES, NEURON_PRECOMPILE_TARGET
from kit.fit import neuron_compile

ROOT = Path(__file__).resolve().parents[2]
E2B_CONFIG = json.loads((ROOT / "tests/package/fixtures/gemma-4-E2B-it.config.json").read_text())


def test_every_neuron_image_builds_and_tests_on_the_build_host():
    assert (NEURON_PRECOMPILE_TARGET, NEURON_BUILD_HOST) == ("inf2.xlarge", "inf2.8xlarge")
    for image in NEURON_IMAGES.values():
        assert BUILD_HOSTS[image] == {"build": (NEURON_BUILD_HOST,)}


def test_the_build_host_is_the_targets_chip_with_more_host_memory():
    target, host = catalog.INSTANCES[NEURON_PRECOMPILE_TARGET], catalog.INSTANCES[NEURON_BUILD_HOST]
    assert (host.chip, host.accelerators, host.neuron_cores) == (target.chip, target.accelerators, target.neuron_cores)
    assert catalog.neuron_platform(NEURON_BUILD_HOST) == catalog.neuron_platform(NEURON_PRECOMPILE_TARGET) == "inf2"
    assert catalog.neuron_tp_degrees(NEURON_BUILD_HOST) == catalog.neuron_tp_degrees(NEURON_PRECOMPILE_TARGET) == (1, 2)
    from ami.neuron.boot_budget import HOSTS
    assert HOSTS[NEURON_BUILD_HOST][1] == 8 * HOSTS[NEURON_PRECOMPILE_TARGET][1] == 128


def test_the_graphs_compiled_on_the_build_host_have_the_targets_shapes_and_cache_key():
    model = "google/gemma-4-E2B-it"
    on_target = neuron_compile("inf2", NEURON_PRECOMPILE_TARGET, model, 4096)
    on_host = neuron_compile("inf2", NEURON_BUILD_HOST, model, 4096)
    assert on_host.engine_args() == on_target.engine_args()
    # The engine on each, with the NeuronCores neuron-ls reports there and the flags the image passes:
    # the same tp degree, LNC 1 (inf2), the same compile configuration and the same cache directory.
    shapes = engine.make_shapes(on_target.prompt_buckets, on_target.total_tokens, on_target.batch_size)
    plans = [engine.plan(E2B_CONFIG, neuron_cores=catalog.INSTANCES[t].neuron_cores,
                         tp_degrees=catalog.neuron_tp_degrees(t), platform=catalog.neuron_platform(t),
                         shapes=shapes, tp_degree=on_target.tp_degree, sdk_version="0.8.16251",
                         model_name=model)
             for t in (NEURON_PRECOMPILE_TARGET, NEURON_BUILD_HOST)]
    assert plans[0] == plans[1] and plans[0].tp_degree == 2
    assert plans[0].neuron_config_kwargs()["logical_nc_config"] == 1
