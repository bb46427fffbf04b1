"""Gemma 4 model facts: each size's text configuration, as published, and what a token reads.

Plain Python, no torch: the CDK app (sizing a deployment) and the harness (the planner, the
roofline) both read this module.

Where the figures come from. Each size's ``text_config`` below carries the shape-bearing fields
of its ``config.json`` on Hugging Face, transcribed in public projects' tests of the real
configs (``source`` on each entry names them and quotes what they assert). Two checks tie the
transcriptions to the release rather than to the projects that copied them, and tests/kit run
both:

- every count here equals the parameter count of transformers' own Gemma 4 text module (5.23,
  ``models/gemma4``; ``gemma4_unified`` for the 12B) built on the meta device from the same
  config, layer by layer;
- the totals agree with what the model cards publish: 26B A4B "25.2B" total and "3.8B" active
  (Hugging Face card of google/gemma-4-26B-A4B-it, as quoted by OpenExplorer/gemma-4-26B-A4B-it:
  "Total model parameters | 25.2B", "Active model parameters | 3.8B"); 31B "31B"; 12B "12B"
  (Google's Gemma 4 overview, ai.google.dev/gemma/docs/core: "Gemma 4 models are available in
  5 parameter sizes: E2B, E4B, 12B, 31B and 26B A4B"). The overview's "12B" is the
  encoder-free "unified" model (model_type ``gemma4_unified``, checkpoint google/gemma-4-12B-it
  per transformers 5.23's ``Gemma4UnifiedTextConfig`` docstring), the dense mid size.

A decode step reads every decoder weight once (for a mixture-of-experts layer: the shared
weights, the router and the ``top_k`` experts routed to, not the others), the output projection
once, one row of each embedding table, and the K/V cache of every attention layer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

# Bytes per stored weight. Weight-only int8/int4 formats also store one 16-bit scale per group of
# ``group_size`` weights, added by ``weight_bytes``.
BYTES_PER_WEIGHT: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}
GROUP_SCALED = {"int8", "int4"}
DEFAULT_GROUP_SIZE = 128  # compressed-tensors w4a16 default group size


def weight_bytes(precision: str, group_size: int | None = DEFAULT_GROUP_SIZE) -> float:
    """Bytes one weight occupies at ``precision``, scales included for grouped formats."""
    try:
        base = BYTES_PER_WEIGHT[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(BYTES_PER_WEIGHT)}") from None
    if precision in GROUP_SCALED and group_size:
        if group_size <= 0:
            raise ValueError(f"group_size must be a positive integer, got {group_size}")
        base += 2.0 / group_size
    return base


@dataclass(frozen=True)
class DecoderArch:
    """A Gemma 4 style decoder, enough of it to count parameters and per-token reads."""

    name: str
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layer_types: tuple[str, ...]  # "sliding" | "full", one per layer
    sliding_window: int | None = None
    global_head_dim: int | None = None  # head dim of full-attention layers when it differs
    global_kv_heads: int | None = None  # KV heads of full-attention layers (with k_eq_v)
    tie_embeddings: bool = True
    kv_shared_layers: int = 0  # the last N layers reuse earlier K/V and have no K/V projections
    double_wide_mlp: bool = False  # KV-shared layers use a 2x intermediate size
    ple_dim: int = 0  # per-layer-embedding width (0: none)
    ple_vocab: int = 0
    k_eq_v: bool = False  # full-attention layers derive V from K: no v_proj there
    experts: int = 0  # mixture-of-experts block in every layer, beside the dense MLP (0: none)
    top_k: int = 0  # experts routed to per token
    expert_intermediate: int = 0
    max_context: int | None = None  # max_position_embeddings
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.layer_types) != self.layers:
            raise ValueError(f"{self.name}: {len(self.layer_types)} layer types for {self.layers} layers")
        if bool(self.experts) != bool(self.top_k) or self.top_k > self.experts:
            raise ValueError(f"{self.name}: top_k {self.top_k} of {self.experts} experts")

    # -- shape of one layer --------------------------------------------------------------------
    def is_full(self, i: int) -> bool:
        return self.layer_types[i] == "full"

    def is_kv_shared(self, i: int) -> bool:
        return i >= self.layers - self.kv_shared_layers

    def layer_head_dim(self, i: int) -> int:
        return (self.global_head_dim or self.head_dim) if self.is_full(i) else self.head_dim

    def layer_kv_heads(self, i: int) -> int:
        if self.is_full(i) and self.k_eq_v and self.global_kv_heads:
            return self.global_kv_heads
        return self.kv_heads

    def expert_params(self, i: int) -> int:
        """Parameters of layer i's routed experts (gate/up and down of every expert)."""
        return self.experts * 3 * self.hidden * self.expert_intermediate

    def layer_params(self, i: int) -> int:
        h, hd, kv = self.hidden, self.layer_head_dim(i), self.layer_kv_heads(i)
        attn = 2 * h * self.heads * hd + hd  # q_proj, o_proj, q_norm
        if not self.is_kv_shared(i):
            v_proj = 0 if (self.k_eq_v and self.is_full(i)) else h * kv * hd
            attn += h * kv * hd + v_proj + hd  # k_proj, v_proj, k_norm
        inter = self.intermediate * (2 if self.double_wide_mlp and self.is_kv_shared(i) else 1)
        mlp = 3 * h * inter  # gate, up, down
        norms = 4 * h
        ple = (2 * h * self.ple_dim + h) if self.ple_dim else 0  # gate, projection, norm
        moe = 0
        if self.experts:
            # router (scale, per-expert scale, projection), the experts, three more norms
            moe = h + self.experts + self.experts * h + self.expert_params(i) + 3 * h
        return attn + mlp + norms + ple + moe

    # -- whole-model counts --------------------------------------------------------------------
    @property
    def decoder_params(self) -> int:
        return sum(self.layer_params(i) for i in range(self.layers)) + self.hidden  # + final norm

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """Separate output projection; 0 when tied (the embedding matrix is reused)."""
        return 0 if self.tie_embeddings else self.vocab * self.hidden

    @property
    def ple_table_params(self) -> int:
        return self.ple_vocab * self.layers * self.ple_dim

    @property
    def ple_projection_params(self) -> int:
        return (self.hidden * self.layers * self.ple_dim + self.ple_dim) if self.ple_dim else 0

    @property
    def total_params(self) -> int:
        return (self.decoder_params + self.embed_params + self.lm_head_params
                + self.ple_table_params + self.ple_projection_params)

    @property
    def inactive_expert_params(self) -> int:
        """Expert parameters one token does not use: (1 - top_k/experts) of every expert block."""
        if not self.experts:
            return 0
        return sum(self.expert_params(i) for i in range(self.layers)) * (self.experts - self.top_k) // self.experts

    @property
    def active_params(self) -> int:
        """Parameters one token uses: everything but the experts it is not routed to."""
        return self.total_params - self.inactive_expert_params

    @property
    def largest_table_params(self) -> int:
        """The biggest single embedding table (a gather reads rows of it)."""
        return max(self.embed_params, self.ple_table_params)

    # -- bytes at rest and per generated token ---------------------------------------------------
    def weights_bytes(self, precision: str, embed_precision: str | None = None,
                      group_size: int | None = DEFAULT_GROUP_SIZE) -> float:
        """Bytes of the text weights held in accelerator memory: decoder layers and the PLE
        projection at ``precision``, embedding tables and an untied head at ``embed_precision``
        (default 16-bit, as weight-only quantized checkpoints keep them)."""
        wb = weight_bytes(precision, group_size)
        eb = weight_bytes(embed_precision or "bf16", group_size)
        tables = self.embed_params + self.lm_head_params + self.ple_table_params
        return (self.decoder_params + self.ple_projection_params) * wb + tables * eb

    def weights_read_per_token(self, precision: str, embed_precision: str | None = None,
                               group_size: int | None = DEFAULT_GROUP_SIZE) -> float:
        """Bytes of weights one decode step of one sequence reads.

        Decoder layers (less the experts the token is not routed to) and the PLE projection at
        ``precision``; the output projection (the tied embedding matrix, read whole to score
        every vocabulary entry) at ``embed_precision`` (default: 16-bit); one looked-up row of
        each embedding table.
        """
        wb = weight_bytes(precision, group_size)
        eb = weight_bytes(embed_precision or "bf16", group_size)
        dense = (self.decoder_params - self.inactive_expert_params + self.ple_projection_params) * wb
        head = self.vocab * self.hidden * eb
        lookups = (self.hidden + self.layers * self.ple_dim) * eb
        return dense + head + lookups

    def kv_read_per_token(self, context_tokens: int, kv_bytes: float = 2.0) -> float:
        """Bytes of K and V read by one decode step at ``context_tokens`` of context.

        Every layer attends, KV-shared layers included (they read the cache of the layer they
        share with); sliding layers read at most ``sliding_window`` positions.
        """
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        return sum(2 * self._span(i, context_tokens) * self.layer_kv_heads(i) * self.layer_head_dim(i) * kv_bytes
                   for i in range(self.layers))

    def kv_cache_bytes(self, context_tokens: int, kv_bytes: float = 2.0) -> float:
        """Bytes of K/V cache one sequence of ``context_tokens`` holds: the layers that own a
        cache (KV-shared layers reuse another's), sliding layers capped at their window."""
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        return sum(2 * self._span(i, context_tokens) * self.layer_kv_heads(i) * self.layer_head_dim(i) * kv_bytes
                   for i in range(self.layers) if not self.is_kv_shared(i))

    def _span(self, i: int, context_tokens: int) -> int:
        if not self.is_full(i) and self.sliding_window:
            return min(context_tokens, self.sliding_window)
        return context_tokens


_LAYER_TYPE = {"sliding_attention": "sliding", "full_attention": "full"}


# What a Gemma 4 text config may hold, per shape field: (least, most). The bounds are far past
# any published size (the 31B: hidden 5376, 60 layers, vocabulary 262,144) and keep the planner's
# arithmetic finite: a negative or zero size made negative bytes and a traceback, or a plan.
_MOST = 10_000_000
_LAYERS_MOST = 10_000  # layer_types is built one entry per layer when the config has none


def _whole(text: Mapping, key: str, lo: int, hi: int = _MOST, default: object = KeyError,
           none_ok: bool = False) -> int | None:
    """``text[key]`` as a whole number in [lo, hi]; ``default`` when absent (KeyError: required);
    None when it is null and ``none_ok``. ValueError naming the field and its valid range."""
    if key not in text:
        if default is KeyError:
            raise KeyError(key)
        return default  # type: ignore[return-value]
    v = text[key]
    if v is None and none_ok:
        return None
    if isinstance(v, float) and v.is_integer() and abs(v) <= hi:
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{key}={v!r:.40} is not a whole number from {lo:,} to {hi:,}")
    return v


def from_text_config(name: str, config: Mapping, source: str = "", *, where: str | None = None) -> DecoderArch:
    """A DecoderArch from a Gemma 4 ``config.json`` (or its ``text_config``), the fields
    transformers' ``Gemma4TextConfig`` defines; ValueError (one line, starting with ``where``,
    default ``name``) on anything else: a missing field, a size that is not a whole number in
    its range (negative, zero heads, a billion layers), an unknown layer type."""
    where = where or name
    text = config.get("text_config", config)
    if not isinstance(text, Mapping):
        raise ValueError(f"{where}: text_config is not an object (not a Gemma 4 config?)")
    tie = config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    try:
        layers = _whole(text, "num_hidden_layers", 1, _LAYERS_MOST)
        kinds = text.get("layer_types") or [
            "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]  # transformers' default
        if not isinstance(kinds, list) or any(k not in _LAYER_TYPE for k in kinds):
            raise ValueError(f"layer_types must be a list of {' or '.join(_LAYER_TYPE)}")
        if len(kinds) != layers:
            raise ValueError(f"{len(kinds)} layer_types for num_hidden_layers={layers}")
        moe = bool(text.get("enable_moe_block"))
        ple = _whole(text, "hidden_size_per_layer_input", 0, default=0, none_ok=True) or 0
        vocab = _whole(text, "vocab_size", 1)
        experts = _whole(text, "num_experts", 1) if moe else 0
        top_k = _whole(text, "top_k_experts", 1, experts) if moe else 0
        return DecoderArch(
            name=name, hidden=_whole(text, "hidden_size", 1), layers=layers,
            intermediate=_whole(text, "intermediate_size", 1), heads=_whole(text, "num_attention_heads", 1),
            kv_heads=_whole(text, "num_key_value_heads", 1), head_dim=_whole(text, "head_dim", 1, default=256),
            vocab=vocab, layer_types=tuple(_LAYER_TYPE[k] for k in kinds),
            sliding_window=_whole(text, "sliding_window", 1, default=None, none_ok=True),
            global_head_dim=_whole(text, "global_head_dim", 1, default=512),
            global_kv_heads=_whole(text, "num_global_key_value_heads", 1, default=None, none_ok=True),
            tie_embeddings=bool(tie),
            kv_shared_layers=_whole(text, "num_kv_shared_layers", 0, layers, default=0, none_ok=True) or 0,
            double_wide_mlp=bool(text.get("use_double_wide_mlp")),
            ple_dim=ple,
            ple_vocab=(_whole(text, "vocab_size_per_layer_input", 1, default=None, none_ok=True) or vocab)
            if ple else 0,
            k_eq_v=bool(text.get("attention_k_eq_v")),
            experts=experts, top_k=top_k,
            expert_intermediate=_whole(text, "moe_intermediate_size", 1) if moe else 0,
            max_context=_whole(text, "max_position_embeddings", 1, 1 << 40, default=None, none_ok=True),
            source=source)
    except KeyError as e:
        raise ValueError(f"{where}: config has no {e.args[0]!r} (not a Gemma 4 text config?)") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: config field not understood ({e})") from None


def _pattern(layers: int, every: int) -> list[str]:
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


@dataclass(frozen=True)
class ModelFacts:
    size: str  # the word a user types: E2B, E4B, 12B, 26B-A4B, 31B
    hf_id: str  # the instruction-tuned checkpoint
    arch: DecoderArch
    # Variants published with int4 weights (compressed-tensors w4a16), if any the kit knows.
    int4_ids: tuple[str, ...] = ()
    # Engine caveat the planner prints (None: served by the kit's engines as E2B is).
    engine_note: str | None = None
    # The public Neuron port of this size (None: there is none, the Neuron backends cannot serve
    # it); KIT_NEURON_PORT is the one the kit's engine loads.
    neuron_port: str | None = None

    @property
    def is_moe(self) -> bool:
        return bool(self.arch.experts)


# -- the published configs ----------------------------------------------------------------------
# Shape-bearing fields of each ``config.json`` ``text_config``. Sources: see each ``source``.
_E2B = dict(
    hidden_size=1536, num_hidden_layers=35, intermediate_size=6144, num_attention_heads=8,
    num_key_value_heads=1, head_dim=256, global_head_dim=512, vocab_size=262144,
    layer_types=_pattern(35, 5), sliding_window=512, num_kv_shared_layers=20, use_double_wide_mlp=True,
    hidden_size_per_layer_input=256, vocab_size_per_layer_input=262144, max_position_embeddings=131072,
    tie_word_embeddings=True)
_E4B = dict(
    hidden_size=2560, num_hidden_layers=42, intermediate_size=10240, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, global_head_dim=512, vocab_size=262144,
    layer_types=_pattern(42, 6), sliding_window=512, num_kv_shared_layers=18, use_double_wide_mlp=False,
    hidden_size_per_layer_input=256, vocab_size_per_layer_input=262144, max_position_embeddings=131072,
    tie_word_embeddings=True)
_12B = dict(
    hidden_size=3840, num_hidden_layers=48, intermediate_size=15360, num_attention_heads=16,
    num_key_value_heads=8, num_global_key_value_heads=1, head_dim=256, global_head_dim=512,
    vocab_size=262144, layer_types=_pattern(48, 6), sliding_window=1024, attention_k_eq_v=True,
    hidden_size_per_layer_input=0, max_position_embeddings=262144, tie_word_embeddings=True)
_26B = dict(
    hidden_size=2816, num_hidden_layers=30, intermediate_size=2112, num_attention_heads=16,
    num_key_value_heads=8, num_global_key_value_heads=2, head_dim=256, global_head_dim=512,
    vocab_size=262144, layer_types=_pattern(30, 6), sliding_window=1024, attention_k_eq_v=True,
    enable_moe_block=True, num_experts=128, top_k_experts=8, moe_intermediate_size=704,
    hidden_size_per_layer_input=0, max_position_embeddings=262144, tie_word_embeddings=True)
_31B = dict(
    hidden_size=5376, num_hidden_layers=60, intermediate_size=21504, num_attention_heads=32,
    num_key_value_heads=16, num_global_key_value_heads=4, head_dim=256, global_head_dim=512,
    vocab_size=262144, layer_types=_pattern(60, 6), sliding_window=1024, attention_k_eq_v=True,
    hidden_size_per_layer_input=0, max_position_embeddings=262144, tie_word_embeddings=True)

TEXT_CONFIGS: dict[str, dict] = {"E2B": _E2B, "E4B": _E4B, "12B": _12B, "26B-A4B": _26B, "31B": _31B}

SOURCES: dict[str, str] = {
    "E2B": ("google/gemma-4-E2B-it config.json text_config; the kit's fixture "
            "tests/package/fixtures/gemma-4-E2B-it.config.json carries it (layer pattern 4 sliding : 1 full)"),
    "E4B": ("google/gemma-4-E4B-it config.json text_config, as public projects' tests of the real config "
            "assert it: EXPECTED_ARCHITECTURE = {hidden_size: 2560, intermediate_size: 10240, num_hidden_layers: 42, "
            "num_attention_heads: 8, num_key_value_heads: 2, head_dim: 256, global_head_dim: 512, sliding_window: 512, "
            "hidden_size_per_layer_input: 256, num_kv_shared_layers: 18} (an artifact builder pinned to "
            "google/gemma-4-E4B-it@a4c2d58b); use_double_wide_mlp: false (an E-series parser's E4B metadata fixture)"),
    "12B": ("google/gemma-4-12B-it (model_type gemma4_unified) text decoder, as one public port transcribes it: "
            "embed_dim 3840, mlp_dim 15360, num_layers 48, num_heads 16, num_kv_heads 8, num_global_kv_heads 1, "
            "head_dim 256, global_head_dim 512, k_eq_v True, sliding_window 1024, pattern 6; a second source "
            "confirms '48 mixed sliding/full' layer_types; the count (11.9B) matches Google's '12B'. Single "
            "transcription: re-check against the checkpoint before relying on it"),
    "26B-A4B": ("google/gemma-4-26B-A4B-it config.json text_config, as several public projects' tests of the real "
                "config assert it (one 'trimmed from mlx-community/gemma-4-26b-a4b-it-4bit at revision 0d77464e; "
                "keys the loader reads are verbatim'): hidden_size 2816, intermediate_size 2112, "
                "moe_intermediate_size 704, num_experts 128, top_k_experts 8, num_hidden_layers 30, "
                "num_attention_heads 16, num_key_value_heads 8, num_global_key_value_heads 2, head_dim 256, "
                "global_head_dim 512, sliding_window 1024, attention_k_eq_v true; transformers 5.23 "
                "configuration_gemma4.py: 'EP plan for google/gemma-4-26B-A4B-it ... num_global_key_value_heads=2'"),
    "31B": ("google/gemma-4-31B-it config.json text_config, as several public projects' tests of the real config "
            "assert it: hidden_size 5376, intermediate_size 21504, num_hidden_layers 60, num_attention_heads 32, "
            "num_key_value_heads 16, num_global_key_value_heads 4, head_dim 256, global_head_dim 512, "
            "sliding_window 1024, attention_k_eq_v true; aws-neuron/neuronx-distributed-inference PR #106 "
            "(refs/pull/106/head 7593d9cd, contrib/models/gemma-4-31b-it/README.md): 'SWA layers (head_dim=256, "
            "16 KV heads) and Global layers (head_dim=512, 4 KV heads)'"),
}

# Neuron ports of Gemma 4 (docs/BRIEF.md, "Neuron, corrected again"): contrib pull requests to
# aws-neuron/neuronx-distributed-inference, E2B (#115) and 31B (#106); none for E4B, 12B or 26B A4B.
KIT_NEURON_PORT = "contrib PR #115 (gemma-4-E2B), the class the kit's Neuron engine loads"
NEURON_31B_PORT = ("only contrib PR #106's port serves 31B on Neuron (validated on inf2.48xlarge, TP=16, LNC=1, "
                   "SDK 2.28: README 'Compatibility Matrix'); the kit's engine loads the E2B port's class")

MODELS: dict[str, ModelFacts] = {
    "E2B": ModelFacts("E2B", "google/gemma-4-E2B-it", from_text_config("Gemma 4 E2B", _E2B, SOURCES["E2B"]),
                      int4_ids=("google/gemma-4-E2B-it-qat-w4a16-ct",), neuron_port=KIT_NEURON_PORT),
    "E4B": ModelFacts("E4B", "google/gemma-4-E4B-it", from_text_config("Gemma 4 E4B", _E4B, SOURCES["E4B"])),
    "12B": ModelFacts("12B", "google/gemma-4-12B-it", from_text_config("Gemma 4 12B", _12B, SOURCES["12B"]),
                      engine_note=("Gemma4UnifiedForConditionalGeneration (encoder-free 12B): the kit has not "
                                   "checked that its pinned vLLM serves it")),
    "26B-A4B": ModelFacts("26B-A4B", "google/gemma-4-26B-A4B-it",
                          from_text_config("Gemma 4 26B A4B", _26B, SOURCES["26B-A4B"])),
    "31B": ModelFacts("31B", "google/gemma-4-31B-it", from_text_config("Gemma 4 31B", _31B, SOURCES["31B"]),
                      neuron_port=NEURON_31B_PORT),
}

GEMMA_4_E2B = MODELS["E2B"].arch

_ALIASES = {"e2b": "E2B", "e4b": "E4B", "12b": "12B", "26b": "26B-A4B", "26b-a4b": "26B-A4B",
            "26ba4b": "26B-A4B", "a4b": "26B-A4B", "31b": "31B"}
# google/gemma-4-<size>[-it][-anything]: the size is the word after "gemma-4-".
_HF_ID = re.compile(r"^google/gemma-4-(e2b|e4b|12b|26b-a4b|31b)(?:-|$)", re.IGNORECASE)


def size_of(model_id: str) -> str | None:
    """The Gemma 4 size a size word or a google/gemma-4-* id names, None otherwise."""
    word = model_id.strip()
    if word.lower().replace("_", "-") in _ALIASES:
        return _ALIASES[word.lower().replace("_", "-")]
    m = _HF_ID.match(word)
    return _ALIASES[m.group(1).lower()] if m else None


def facts_for(model_id: str) -> ModelFacts | None:
    size = size_of(model_id)
    return MODELS[size] if size else None


def default_precision(model_id: str) -> str:
    """The weight precision a model id is published in: int4 for compressed-tensors w4a16 ids."""
    return "int4" if re.search(r"w4a16|int4|q4", model_id, re.IGNORECASE) else "bf16"


def load_config(path: str | Path) -> DecoderArch:
    """A DecoderArch from a config.json on disk, read by kit/jsonfile.py (a regular file, bounded,
    nesting capped); ValueError (one line naming the file) when it is not one."""
    from kit.jsonfile import read_object

    p = Path(path)
    return from_text_config(p.parent.name or p.stem, read_object(p), source=str(path), where=str(path))


def valid_words() -> str:
    return ", ".join(MODELS)
