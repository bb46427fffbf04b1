"""Neuron generator: a thin layer over NxD Inference (the Neuron SDK line kit/pins.py pins) and the Gemma 4
text model class from NxD Inference's contrib tree (``contrib/models/gemma-4-E2B/src``).

What it does, in order: build NxDI's ``NeuronConfig`` from ``neuron_config.plan`` (shapes,
tp degree, bf16), compile once into the cache directory (skipped when a marker with the same
cache key is there), load the compiled model onto the NeuronCores, and serve it through the
continuous-batching scheduler with ``nxdi_slots.NxDISlotRunner`` (context encoding into one slot,
token generation over the live slots), with the same per-row sampling as the CPU generator. The Neuron packages are imported
here, lazily, and nowhere else: the rest of the engine runs without them.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

from .boot_budget import Checkpoint, boot_budget, check_boot_budget, host_memory_bytes, read_checkpoint
from .chat import ChatFormat
from .generator import BatchedGenerator, Limits
from .neuron_config import DTYPES, ConfigError, NeuronEngineConfig, kv_cache_bytes, parse_neuron_ls, plan, text_config

log = logging.getLogger(__name__)
MARKER = "ami-engine.json"


def transformers5_shim() -> None:
    """NxD (2.28 through 2.31) imports ``transformers.utils.fx.HFTracer``, which transformers 5
    removed. The Neuron image pins transformers 4.57 (which has it), so this does nothing there;
    it keeps the engine importable next to transformers 5 (the dev environment). NxD only names the
    class, so an empty stand-in module is enough (the Gemma 4 ports document the same stub)."""
    try:
        importlib.import_module("transformers.utils.fx")
    except ImportError:
        fx = types.ModuleType("transformers.utils.fx")
        fx.HFTracer = type("HFTracer", (), {})
        fx.symbolic_trace = None
        sys.modules["transformers.utils.fx"] = fx


def detect_neuron_cores() -> int:
    """NeuronCores visible to this process: NEURON_RT_NUM_CORES if set, else neuron-ls."""
    if os.environ.get("NEURON_RT_NUM_CORES"):
        return int(os.environ["NEURON_RT_NUM_CORES"])
    exe = shutil.which("neuron-ls") or "/opt/aws/neuron/bin/neuron-ls"
    try:
        out = subprocess.run([exe, "--json-output"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"cannot count NeuronCores ({exe} --json-output failed: {exc}); "
                          "pass --tp-degree or set NEURON_RT_NUM_CORES") from None
    return parse_neuron_ls(out.stdout)


def _import(spec: str):
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {spec!r} ({exc}); is --neuron-model-src right?") from None


def engine_config(model_dir: str, shapes, dtype: str, tp_degree: int | None, cache_root: str,
                  served_name: str, tp_degrees=(), platform: str | None = None) -> NeuronEngineConfig:
    """``tp_degrees`` and ``platform`` are the catalog's for this instance (--tp-degrees, --platform)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        model_config = json.load(f)
    if importlib.util.find_spec("neuronx_distributed_inference") is None:
        raise ConfigError("neuronx_distributed_inference is not installed; the neuron generator "
                          "runs on the Neuron image (use --device cpu elsewhere)")
    transformers5_shim()
    sdk = importlib.import_module("neuronx_distributed_inference").__dict__.get("__version__", "unknown")
    cores = detect_neuron_cores()
    # On-disk weights (vision and audio towers included, which the text port does not load):
    # an upper bound for the memory check.
    weight_bytes = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors")) or None
    # The checkpoint's commit, as the image build and the boot record it beside the weights
    # (ami/scripts/neuron-precompile.sh, userdata/engine-neuron.sh: .kit-revision, written before
    # the compile): part of the compiled-cache key.
    rev_file = Path(model_dir) / ".kit-revision"
    revision = rev_file.read_text().strip() if rev_file.is_file() else None
    cfg = plan(model_config, neuron_cores=cores, tp_degrees=tp_degrees, platform=platform,
               shapes=shapes, dtype=dtype, tp_degree=tp_degree, cache_root=cache_root,
               sdk_version=str(sdk), model_name=served_name, weight_bytes=weight_bytes, revision=revision)
    host = host_memory_bytes()
    if weight_bytes and host:
        # Does this boot fit the host memory and the readiness window (KIT_READY_TIMEOUT_S, from
        # userdata/engine-neuron.sh)? Refused in one line if not (ami/neuron/boot_budget.py).
        # The compile's copies are modelled term by term: the checkpoint's text tensors and tied
        # embedding from its safetensors headers, the KV cache as the port allocates it.
        window = os.environ.get("KIT_READY_TIMEOUT_S")
        tied = text_config(model_config).get("tie_word_embeddings", model_config.get("tie_word_embeddings", True))
        ckpt = read_checkpoint(model_dir, bool(tied)) or Checkpoint.upper_bound(weight_bytes)
        kv = kv_cache_bytes(model_config, shapes, DTYPES[dtype][1])
        budget = check_boot_budget(boot_budget(ckpt, cfg.tp_degree, shapes, host,
                                               float(window) if window else None, is_compiled(cfg),
                                               kv_bytes=kv, vcpus=os.cpu_count()))
        log.info("boot budget: %s", budget.line())
    return cfg


def is_compiled(cfg: NeuronEngineConfig) -> bool:
    """The cache holds this exact configuration (the marker is written after a whole compile)."""
    marker = Path(cfg.compiled_dir) / MARKER
    return marker.exists() and json.loads(marker.read_text()).get("cache_key") == cfg.cache_key


def construct_model(model_dir: str, cfg: NeuronEngineConfig, model_src: str | None, model_class: str,
                    config_class: str, torch_dtype=None, **overrides):
    """The NxDI application model, configured and not yet compiled or loaded: what the engine
    serves, and what the port check (tests/neuron/port_check.py) runs on CPU. ``torch_dtype``
    overrides the planned dtype and ``overrides`` NeuronConfig keys (the CPU check runs float32,
    with ``on_cpu``)."""
    import torch

    transformers5_shim()
    if model_src:
        sys.path.insert(0, model_src)
        if os.path.exists(os.path.join(model_src, "ndxi_patch.py")):
            importlib.import_module("ndxi_patch").apply_patch()  # the port's NxDI fixes
    from .nxdi_compat import load_config

    model_cls, config_cls = _import(model_class), _import(config_class)
    neuron_config_cls = config_cls.get_neuron_config_cls()
    dtype = torch_dtype if torch_dtype is not None else getattr(torch, cfg.torch_dtype)
    neuron_config = neuron_config_cls(**{**cfg.neuron_config_kwargs(), **overrides}, torch_dtype=dtype)
    # config.json read directly: NxD Inference's load_pretrained_config asks AutoConfig, which
    # does not know Gemma 4 under the image's transformers 4.57 (ami/neuron/nxdi_compat.py).
    config = config_cls(neuron_config, load_config=load_config(model_dir))
    return model_cls(model_dir, config)


def build_model(model_dir: str, cfg: NeuronEngineConfig, model_src: str | None, model_class: str,
                config_class: str, load: bool = True):
    """Compile (unless the cache holds this exact configuration) and, if ``load``, load onto the
    NeuronCores. Returns the NxDI application model."""
    model = construct_model(model_dir, cfg, model_src, model_class, config_class)

    marker = Path(cfg.compiled_dir) / MARKER
    if is_compiled(cfg):
        log.info("reusing compiled model in %s", cfg.compiled_dir)
    else:
        log.info("compiling for %s into %s (once per configuration)", cfg.marker(), cfg.compiled_dir)
        model.compile(cfg.compiled_dir)
        marker.write_text(json.dumps(cfg.marker(), indent=1))  # written last: a cut compile recompiles
    if load:
        model.load(cfg.compiled_dir)
    return model


def make_generator(model_id: str, model_dir: str, cfg: NeuronEngineConfig, limits: Limits,
                   batch_wait_s: float, model_src: str | None, model_class: str,
                   config_class: str, max_queue: int = 64) -> BatchedGenerator:
    from transformers import GenerationConfig

    from .nxdi_compat import load_tokenizer

    from .nxdi_slots import NxDISlotRunner

    model = build_model(model_dir, cfg, model_src, model_class, config_class)
    tokenizer = load_tokenizer(model_dir)  # a transformers-5 tokenizer file under 4.57 too
    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        eos = None
    chat = ChatFormat.for_tokenizer(tokenizer, eos if isinstance(eos, list) else [eos])
    return BatchedGenerator(model_id, chat, limits, NxDISlotRunner(model, cfg.shapes.batch_size, cfg.shapes.max_prompt_tokens),
                            batch_wait_s, max_queue)
