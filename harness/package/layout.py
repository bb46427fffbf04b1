"""Where each source tensor goes in a text-only package, and the package's config.json.

Gemma 4 checkpoints are published as ``Gemma4ForConditionalGeneration``: the text decoder under
``model.language_model.``, the towers under ``model.vision_tower.``, ``model.audio_tower.``,
``model.embed_vision.``, ``model.embed_audio.`` (transformers 5.23
``models/gemma4/modeling_gemma4.py``: ``Gemma4ForConditionalGeneration._tied_weights_keys`` names
``model.language_model.embed_tokens.weight``). A package is text only, laid out as
transformers' ``Gemma4ForCausalLM`` (``model.`` + the text model's names, ``lm_head.weight``
tied to ``model.embed_tokens.weight``; same file) with the source's ``text_config`` as its config.

Tensor groups: ``model.embed_tokens_per_layer.weight`` (per-layer embeddings),
``model.embed_tokens.weight`` (token embeddings), ``lm_head.weight``, every other 2-D ``.weight``
(a Linear: attention and MLP projections, the per-layer input gates and projections, the
per-layer model projection), and everything else (norms, per-layer scalars) as "other".
"""
from __future__ import annotations

import copy
import re

from kit.schemes import GROUP_SIZE, Scheme

MM_TEXT_PREFIX = "model.language_model."
TOWER_PREFIXES = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")
LM_HEAD = "lm_head.weight"
EMBED = "model.embed_tokens.weight"
PLE = "model.embed_tokens_per_layer.weight"
# compressed-tensors' pack-quantized tensor names (compressors/pack_quantized/base.py,
# PackedQuantizationCompressor.compression_param_names, symmetric: no zero point).
PACKED_SUFFIXES = ("weight_packed", "weight_scale", "weight_shape")


def package_name(source_name: str, multimodal: bool) -> str | None:
    """The package's name for a source tensor, or None when the tensor is dropped (towers)."""
    if source_name == LM_HEAD:
        return LM_HEAD
    if multimodal:
        if source_name.startswith(MM_TEXT_PREFIX):
            return "model." + source_name[len(MM_TEXT_PREFIX):]
        return None
    if source_name.startswith(TOWER_PREFIXES):
        return None
    return source_name


def source_name(package_name: str, multimodal: bool) -> str:
    """The name a package tensor has in a source of this layout (the inverse of package_name)."""
    if multimodal and package_name.startswith("model."):
        return MM_TEXT_PREFIX + package_name[len("model."):]
    return package_name


def is_multimodal(names) -> bool:
    return any(n.startswith(MM_TEXT_PREFIX) for n in names)


def group_of(name: str, shape: tuple[int, ...]) -> str:
    """Tensor group of a package tensor name (before packing)."""
    if name == PLE:
        return "per_layer_embeddings"
    if name == EMBED:
        return "token_embeddings"
    if name == LM_HEAD:
        return "lm_head"
    if name.endswith(".weight") and len(shape) == 2:
        return "linear"
    return "other"


def module_of(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _weights_args(fmt: str) -> dict:
    """compressed-tensors QuantizationArgs (0.17.0 ``quantization/quant_args.py``) for a format."""
    if fmt == "int4":
        return {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                "group_size": GROUP_SIZE["int4"], "dynamic": False, "actorder": None,
                "block_structure": None, "observer": "minmax", "observer_kwargs": {}}
    if fmt == "int8":
        return {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                "group_size": None, "dynamic": False, "actorder": None,
                "block_structure": None, "observer": "minmax", "observer_kwargs": {}}
    raise ValueError(f"no quantization args for format {fmt!r}")


def quantization_config(s: Scheme, ignore: list[str], ct_version: str) -> dict:
    """config.json ``quantization_config``: pack-quantized, one group for Linear layers (and
    ``lm_head`` when untied), one for the embedding tables the scheme packs.

    Embedding targets are regexes on module names ("re:" prefix, compressed-tensors
    ``utils/match.py`` ``match_name``); vLLM builds a quantized ``VocabParallelEmbedding`` for a
    targeted embedding (vLLM ``compressed_tensors.py`` ``get_quant_method``).
    """
    # An untied lm_head is named too: vLLM builds it as a ParallelLMHead (a VocabParallelEmbedding,
    # not a LinearBase) and gives it a linear scheme only when a target matches it (vLLM
    # compressed_tensors.py get_quant_method: "ParallelLMHead subclasses VocabParallelEmbedding but
    # is handled above as a linear"; vllm/model_executor/models/gemma4.py names it "lm_head").
    linear_targets = ["Linear", "lm_head"] if s.untied_lm_head else ["Linear"]
    groups = {"group_0": {"targets": linear_targets, "weights": _weights_args(s.linear),
                          "input_activations": None, "output_activations": None,
                          "format": "pack-quantized"}}
    emb_targets = []
    if s.per_layer_embeddings == "int4":
        emb_targets.append("re:.*embed_tokens_per_layer$")
    if s.token_embeddings == "int4":
        emb_targets.append("re:.*embed_tokens$")
    if emb_targets:
        groups["group_1"] = {"targets": emb_targets, "weights": _weights_args("int4"),
                             "input_activations": None, "output_activations": None,
                             "format": "pack-quantized"}
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "version": ct_version,
        "config_groups": groups,
        "ignore": sorted(ignore),
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
        "sparsity_config": {},
        "transform_config": {},
    }


def text_config(source_config: dict, s: Scheme, qconfig: dict) -> dict:
    """The package's config.json: the source's text config as a ``Gemma4ForCausalLM``."""
    src = copy.deepcopy(source_config)
    cfg = src.get("text_config", src)
    cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # top-level ids win over defaults
        if key in src and key not in cfg:
            cfg[key] = src[key]
    cfg["architectures"] = ["Gemma4ForCausalLM"]
    cfg.setdefault("model_type", "gemma4_text")
    cfg["tie_word_embeddings"] = not s.untied_lm_head
    cfg.setdefault("dtype", src.get("dtype", src.get("torch_dtype", "bfloat16")))
    cfg["quantization_config"] = qconfig
    return cfg


def matches(module: str, pattern: str) -> bool:
    """compressed-tensors name matching: a ``re:``-prefixed regex or the exact name.

    compressed-tensors 0.17.0 ``utils/match.py`` ``match_name``: ``re:`` patterns use
    ``re.match`` (anchored at the start only); plain targets compare equal.
    """
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern
