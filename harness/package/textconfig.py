"""A Gemma 4 config.json's text config, checked before anything is built from it.

``sizes``, the build and ``check`` all derive tensor shapes from the config by building
transformers' Gemma 4 text model on the meta device (harness.package.sizes.text_shapes). What
reaches that model is checked here first, in bounded work and one line per problem: a config
that is not an object, a field of the wrong type, a size out of range (a 10,000,000-layer config
would otherwise build a meta model for minutes), layer types that do not match the layer count.

The ranges are the kit's, chosen to bound work, far above any published Gemma 4: the E2B config
has 35 layers, hidden size 1536, vocabulary 262,144 (tests/package/fixtures). A 512-layer meta
model builds in under a second. Linear input widths must be multiples of 32 because every int4
scheme packs groups of 32 values along a row (schemes.GROUP_SIZE).
"""
from __future__ import annotations

from typing import Any

from harness.package.errors import PackageError

MAX_LAYERS = 512
MAX_WIDTH = 1 << 16  # hidden, intermediate, head and per-layer-input sizes
MAX_HEADS = 1024
MAX_VOCAB = 1 << 22
MAX_POSITIONS = 1 << 24
GROUP = 32
LAYER_TYPES = ("sliding_attention", "full_attention")  # the two Gemma 4's decoder layers use

# field: (smallest, largest, must be a multiple of GROUP)
INTS: dict[str, tuple[int, int, bool]] = {
    "hidden_size": (GROUP, MAX_WIDTH, True),
    "intermediate_size": (GROUP, MAX_WIDTH, True),
    "head_dim": (GROUP, MAX_WIDTH, True),
    "global_head_dim": (GROUP, MAX_WIDTH, True),
    "hidden_size_per_layer_input": (0, MAX_WIDTH, True),  # 0: no per-layer inputs
    "num_hidden_layers": (1, MAX_LAYERS, False),
    "num_attention_heads": (1, MAX_HEADS, False),
    "num_key_value_heads": (1, MAX_HEADS, False),
    "num_global_key_value_heads": (1, MAX_HEADS, False),
    "num_kv_shared_layers": (0, MAX_LAYERS - 1, False),
    "vocab_size": (1, MAX_VOCAB, False),
    "vocab_size_per_layer_input": (1, MAX_VOCAB, False),
    "max_position_embeddings": (1, MAX_POSITIONS, False),
    "sliding_window": (1, MAX_POSITIONS, False),
}
BOOLS = ("tie_word_embeddings", "use_double_wide_mlp", "attention_k_eq_v", "enable_moe_block", "attention_bias")
# Fields every shape depends on: a config without one would get transformers' default silently.
REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "vocab_size")
# What harness.package.resident reads for ``sizes`` besides those (it models vLLM's load).
RESIDENT = ("global_head_dim", "hidden_size_per_layer_input", "layer_types", "rope_parameters",
            "max_position_embeddings")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def text_config(config: Any, where: str = "config.json") -> dict:
    """The text config of a Gemma 4 config (``text_config``, or the config itself when flat),
    checked; ``PackageError`` naming the first field that is wrong and what would be valid."""
    if not isinstance(config, dict):
        raise PackageError(f"{where}: a JSON {type(config).__name__}; expected an object (a Gemma 4 config)")
    text = config.get("text_config", config)
    if not isinstance(text, dict):
        raise PackageError(f"{where}: text_config is a {type(text).__name__}; expected an object")
    model_type = text.get("model_type", config.get("model_type"))
    if model_type is not None and not (isinstance(model_type, str) and model_type.startswith("gemma4")):
        raise PackageError(f"{where}: model_type {model_type!r}; this kit packs Gemma 4 (gemma4, gemma4_text)")
    for k in REQUIRED:
        if k not in text:
            raise PackageError(f"{where}: text_config has no {k}; every tensor shape depends on it")
    for k, (lo, hi, grouped) in INTS.items():
        if k not in text or (text[k] is None and k == "num_global_key_value_heads"):
            continue
        v = text[k]
        if not _int(v) or not lo <= v <= hi or (grouped and v % GROUP):
            rule = f"a whole number from {lo:,} to {hi:,}" + (f", a multiple of {GROUP}" if grouped else "")
            raise PackageError(f"{where}: {k} {v!r}; expected {rule}")
    for k in BOOLS:
        for holder in (text, config):
            if k in holder and not isinstance(holder[k], bool):
                raise PackageError(f"{where}: {k} {holder[k]!r}; expected true or false")
    if text.get("enable_moe_block"):
        raise PackageError(f"{where}: enable_moe_block true (a mixture-of-experts model); this kit packs "
                           "dense Gemma 4 checkpoints only (E2B, E4B, 12B, 31B), not 26B A4B")
    layers = text["num_hidden_layers"]
    heads = text["num_attention_heads"]
    for k in ("num_key_value_heads", "num_global_key_value_heads"):
        kv = text.get(k)
        if kv is not None and (kv > heads or heads % kv):
            raise PackageError(f"{where}: {k} {kv} with num_attention_heads {heads}; expected a divisor "
                               "of num_attention_heads (each key/value head serves a whole group of query heads)")
    shared = text.get("num_kv_shared_layers", 0)
    if shared >= layers:
        raise PackageError(f"{where}: num_kv_shared_layers {shared} with num_hidden_layers {layers}; "
                           "expected fewer shared layers than layers")
    if "layer_types" in text:
        types = text["layer_types"]
        if not isinstance(types, list) or len(types) != layers:
            got = f"{len(types)} entries" if isinstance(types, list) else f"a {type(types).__name__}"
            raise PackageError(f"{where}: layer_types is {got}; expected a list of num_hidden_layers "
                               f"({layers}) entries")
        bad = next((t for t in types if t not in LAYER_TYPES), None)
        if bad is not None:
            raise PackageError(f"{where}: layer_types has {bad!r}; expected {' or '.join(LAYER_TYPES)}")
    return text


def resident_fields(text: dict, where: str = "config.json") -> None:
    """The fields harness.package.resident reads for ``sizes`` (it models what vLLM allocates, from
    the numbers a published config carries): present, and rope parameters per layer type."""
    for k in RESIDENT:
        if k not in text:
            raise PackageError(f"{where}: text_config has no {k}; `sizes` needs it to model what vLLM holds")
    rope = text["rope_parameters"]
    if not isinstance(rope, dict):
        raise PackageError(f"{where}: rope_parameters is a {type(rope).__name__}; expected an object "
                           f"with an entry per layer type ({', '.join(LAYER_TYPES)})")
    for t in sorted(set(text["layer_types"])):
        params = rope.get(t)
        if not isinstance(params, dict):
            raise PackageError(f"{where}: rope_parameters has no object for {t!r}; expected one per layer type")
        for k, v in params.items():
            if not isinstance(v, (str, int, float, bool)) and v is not None:
                raise PackageError(f"{where}: rope_parameters[{t!r}][{k!r}] is a {type(v).__name__}; "
                                   "expected a number or a string")
        f = params.get("partial_rotary_factor", 1.0)
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 < f <= 1:
            raise PackageError(f"{where}: rope_parameters[{t!r}].partial_rotary_factor {f!r}; "
                               "expected a number above 0, at most 1")
        if not isinstance(params.get("rope_type", "default"), str):
            raise PackageError(f"{where}: rope_parameters[{t!r}].rope_type {params['rope_type']!r}; expected a string")


def transformers_config(text: dict, where: str = "config.json"):
    """transformers' ``Gemma4TextConfig`` of a checked text config (its own strict typing catches
    the fields not checked here); ``PackageError`` when it refuses."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import Gemma4TextConfig

    fields = {k: v for k, v in text.items()
              if k not in ("architectures", "quantization_config", "model_type", "transformers_version")}
    try:
        return Gemma4TextConfig(**fields)
    except (TypeError, ValueError, KeyError, AttributeError, StrictDataclassError) as e:
        # huggingface_hub 2.4.0's strict dataclasses (which type Gemma4TextConfig's fields) raise
        # StrictDataclassFieldValidationError, an Exception subclass, with the cause on later lines
        why = " ".join(ln.strip() for ln in str(e).strip().splitlines()) or type(e).__name__
        raise PackageError(f"{where}: transformers' Gemma4TextConfig refuses it: {why[:240]}") from None
