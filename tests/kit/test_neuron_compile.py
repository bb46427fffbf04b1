"""What the Neuron engine compiles for a deployment comes from the planner (kit/fit.py
``neuron_compile``): TP degree, batch, total tokens and prompt buckets. Checked against the engine
itself (ami/neuron: its defaults, its command line, its own plan of the same checkpoint config),
and a model without the Neuron port the engine loads is refused in one line."""
from __future__ import annotations

import json

import pytest

from ami.neuron import neuron_config as engine
from kit import catalog
from kit import fit as kp
from kit.models import TEXT_CONFIGS

E2B = "google/gemma-4-E2B-it"


def test_the_default_deployment_compiles_the_engines_default_shapes():
    """max_model_len 4096 (the kit's default) gives exactly the engine's DEFAULT_SHAPES, so an image
    built before the shapes were passed has the same cache key as one built after."""
    nc = kp.neuron_compile("inf2", "inf2.xlarge", E2B, kp.DEFAULT_CONTEXT)
    d = engine.DEFAULT_SHAPES
    assert (nc.prompt_buckets, nc.total_tokens, nc.batch_size) == (d.prompt_buckets, d.total_tokens, d.batch_size)
    assert (nc.tp_degree, nc.tp_degrees, nc.platform) == (2, (1, 2), "inf2")


@pytest.mark.parametrize("tokens,buckets", [
    (256, (128,)), (1024, (128, 512)), (2048, (128, 512, 1024)), (4096, (128, 512, 2048)),
    (8192, (128, 512, 2048, 4096)), (32768, (128, 512, 2048, 8192, 16384))])
def test_prompt_buckets_every_4x_up_to_half_the_total(tokens, buckets):
    assert kp.neuron_prompt_buckets(tokens) == buckets
    engine.make_shapes(buckets, tokens, kp.NEURON_BATCH_SIZE)  # the engine accepts them


@pytest.mark.parametrize("backend,itype,tokens", [
    ("inf2", "inf2.xlarge", 4096), ("inf2", "inf2.xlarge", 8192), ("inf2", "inf2.24xlarge", 4096),
    ("trn1", "trn1.2xlarge", 2048), ("trn1", "trn1.32xlarge", 16384)])
def test_the_engine_plans_the_same_compile_from_the_checkpoint_config(tmp_path, backend, itype, tokens):
    """The engine's command line parses the compile's flags into the same shapes, and the engine's
    own plan of E2B's config on that instance picks the same degree, accepts it when forced, and
    finds it fits the NeuronCore's memory."""
    from ami.neuron.cli import parse_args

    nc = kp.neuron_compile(backend, itype, E2B, tokens)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cfg = {"text_config": dict(TEXT_CONFIGS["E2B"])}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    a = parse_args(["--device", "neuron", "--model", str(ckpt), *nc.engine_args()])
    assert a.shapes == engine.make_shapes(nc.prompt_buckets, nc.total_tokens, nc.batch_size)
    assert (a.tp_degree, tuple(a.tp_degrees), a.platform) == (nc.tp_degree, nc.tp_degrees, nc.platform)
    cores = catalog.INSTANCES[itype].neuron_cores
    chosen = engine.plan(cfg, neuron_cores=cores, tp_degrees=nc.tp_degrees, platform=nc.platform, shapes=a.shapes)
    p = kp.check_deploy(backend, itype, E2B, tokens)
    forced = engine.plan(cfg, neuron_cores=cores, tp_degrees=nc.tp_degrees, platform=nc.platform, shapes=a.shapes,
                         tp_degree=nc.tp_degree, weight_bytes=int(p.weights_bytes))
    assert chosen.tp_degree == forced.tp_degree == nc.tp_degree
    assert forced.bytes_per_core == p.per_device_bytes and forced.cache_key == chosen.cache_key


def test_the_planner_sizes_a_neuron_deployment_at_its_compiled_batch():
    """vLLM is planned for one sequence; the Neuron engine holds K/V for every slot it compiled."""
    p = kp.check_deploy("inf2", "inf2.xlarge", E2B, 8192)
    cfg = {"text_config": dict(TEXT_CONFIGS["E2B"])}
    shapes = engine.make_shapes(kp.neuron_prompt_buckets(8192), 8192, kp.NEURON_BATCH_SIZE)
    assert p.kv_bytes == engine.kv_cache_bytes(cfg, shapes, 2)
    assert kp.deploy_concurrency(catalog.backend("g6")) == 1


PORT = "the kit's Neuron engine serves only the model whose Neuron port it loads (Gemma 4 E2B, NxD Inference contrib PR #115)"


@pytest.mark.parametrize("model,why", [
    ("google/gemma-4-E4B-it", f"{PORT}, and no public Neuron port of Gemma 4 E4B; valid: {E2B}"),
    ("google/gemma-4-12B-it", f"{PORT}, and no public Neuron port of Gemma 4 12B; valid: {E2B}"),
    ("google/gemma-4-26B-A4B-it", f"{PORT}, and no public Neuron port of Gemma 4 26B A4B; valid: {E2B}"),
    # 31B has a public port (contrib PR #106) with its own class; the engine loads E2B's
    ("google/gemma-4-31B-it", f"{PORT}, and only contrib PR #106's port serves 31B on Neuron"),
    ("Qwen/Qwen3-8B", f"{PORT}, and not a Gemma 4 size the kit knows; valid: {E2B}"),
])
@pytest.mark.parametrize("backend,itype", [("inf2", "inf2.xlarge"), ("trn1", "trn1.2xlarge"),
                                           ("inf2", "inf2.48xlarge"), ("trn1", "trn1.32xlarge")])
def test_a_model_without_the_engines_port_is_refused_in_one_line(backend, itype, model, why):
    """On every Neuron instance, however much memory it has: the engine cannot load it."""
    with pytest.raises(kp.PlanError) as e:
        kp.neuron_compile(backend, itype, model, 4096)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{model}: {why}"), msg


@pytest.mark.parametrize("backend,itype", [("inf2", "inf2.xlarge"), ("trn1", "trn1.2xlarge")])
def test_int4_e2b_is_refused_naming_the_precision(backend, itype):
    with pytest.raises(kp.PlanError) as e:
        kp.neuron_compile(backend, itype, "google/gemma-4-E2B-it-qat-w4a16-ct", 4096)
    msg = str(e.value)
    assert "\n" not in msg and "Neuron engine: --dtype int4 refused" in msg, msg
    assert msg.endswith(f"no {backend} type in the catalog serves it")


def test_e2b_too_long_for_memory_names_the_numbers():
    with pytest.raises(kp.PlanError) as e:
        kp.neuron_compile("inf2", "inf2.xlarge", E2B, 131072)
    msg = str(e.value)
    assert msg.startswith(f"{E2B} (bf16, max_model_len 131072, compiled batch 4) does not fit inf2.xlarge: "
                          "Neuron engine: 9.3 GB of weights over tp degree 2 plus a "), msg


def test_make_run_offline_plan_says_the_same():
    """``make run``'s offline plan (harness.cost.placements configured_fit_lines) plans inf2 at the compiled
    batch and shows a model the engine cannot load as refused, not 'deployed as configured'."""
    from harness.cost.placements import configured_fit_lines

    lines = configured_fit_lines({"backends": "inf2", "model": "Qwen/Qwen3-8B"})
    assert "the compiled batch of 4 on Neuron" in lines[0]
    assert lines[1].split()[:3] == ["inf2", "Qwen/Qwen3-8B:", "REFUSED:"] and f"valid: {E2B}" in lines[1]
    ok = configured_fit_lines({"backends": "inf2", "model": E2B})[1]
    assert "fits, TP 2" in ok
