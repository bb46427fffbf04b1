"""Model architecture facts the roofline needs: which weights one generated token reads.

Plain Python, no torch. A decode step reads every decoder weight once, the output projection
(the LM head) once, and the KV cache of every attention layer; an embedding table is only looked
up (one row per token), never read whole. For Gemma 4 E2B that distinction is most of the model:
the per-layer-embedding (PLE) table alone holds ~2.35 B of its ~4.63 B text parameters.

Gemma 4 E2B figures (``google/gemma-4-E2B-it`` ``config.json``, ``text_config``), as transcribed
in several public projects' tests of the real config and consistent with the Gemma 4 code in
transformers 5.23 (``models/gemma4``): hidden_size 1536, 35 layers, intermediate_size 6144,
``use_double_wide_mlp`` (the KV-shared layers use a 2x MLP), 8 query heads, 1 KV head, head_dim
256 on sliding layers and ``global_head_dim`` 512 on full-attention layers, layer pattern four
sliding : one full (sliding window 512), ``num_kv_shared_layers`` 20 (the last 20 layers reuse the
K/V of earlier layers and have no K/V projections), vocab 262,144, tied input/output embeddings,
PLE width 256 per layer over a 262,144-entry vocabulary. ``tests/cost/test_architecture.py`` checks
these counts against transformers' own Gemma 4 module built on the meta device.

The vision and audio encoders of the checkpoint are not read while decoding text and are left
out. The seed's whole-checkpoint sizes (6.32 GiB bf16, 2.85 GiB int4 with int4 embeddings) are
kept in ``harness/cost/seed_reference.json``; they are sizes on disk, not bytes read per token.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness import catalog
from harness.package.schemes import SCHEMES

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
    """A decoder-only text model, enough of it to count parameters and per-token reads."""

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
    global_kv_heads: int | None = None
    tie_embeddings: bool = True
    kv_shared_layers: int = 0  # the last N layers reuse earlier K/V and have no K/V projections
    double_wide_mlp: bool = False  # KV-shared layers use a 2x intermediate size
    ple_dim: int = 0  # per-layer-embedding width (0: none)
    ple_vocab: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.layer_types) != self.layers:
            raise ValueError(f"{self.name}: {len(self.layer_types)} layer types for {self.layers} layers")

    # -- shape of one layer --------------------------------------------------------------------
    def is_full(self, i: int) -> bool:
        return self.layer_types[i] == "full"

    def is_kv_shared(self, i: int) -> bool:
        return i >= self.layers - self.kv_shared_layers

    def layer_head_dim(self, i: int) -> int:
        return (self.global_head_dim or self.head_dim) if self.is_full(i) else self.head_dim

    def layer_kv_heads(self, i: int) -> int:
        return (self.global_kv_heads or self.kv_heads) if self.is_full(i) else self.kv_heads

    def layer_params(self, i: int) -> int:
        h, hd, kv = self.hidden, self.layer_head_dim(i), self.layer_kv_heads(i)
        attn = 2 * h * self.heads * hd + hd  # q_proj, o_proj, q_norm
        if not self.is_kv_shared(i):
            attn += 2 * h * kv * hd + hd  # k_proj, v_proj, k_norm
        inter = self.intermediate * (2 if self.double_wide_mlp and self.is_kv_shared(i) else 1)
        mlp = 3 * h * inter  # gate, up, down
        norms = 4 * h
        ple = (2 * h * self.ple_dim + h) if self.ple_dim else 0  # gate, projection, norm
        return attn + mlp + norms + ple

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

    # -- bytes per generated token ---------------------------------------------------------------
    def weights_read_per_token(self, precision: str, embed_precision: str | None = None,
                               group_size: int | None = DEFAULT_GROUP_SIZE) -> float:
        """Bytes of weights one decode step reads.

        Decoder layers and the PLE projection at ``precision``; the output projection (the tied
        embedding matrix, read whole to score every vocabulary entry) at ``embed_precision``
        (default: 16-bit, as weight-only quantized checkpoints usually keep it); one looked-up
        row of each embedding table.
        """
        wb = weight_bytes(precision, group_size)
        eb = weight_bytes(embed_precision or "bf16", group_size)
        dense = (self.decoder_params + self.ple_projection_params) * wb
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
        total = 0.0
        for i in range(self.layers):
            span = context_tokens
            if not self.is_full(i) and self.sliding_window:
                span = min(context_tokens, self.sliding_window)
            total += 2 * span * self.layer_kv_heads(i) * self.layer_head_dim(i) * kv_bytes
        return total


GEMMA_4_E2B = DecoderArch(
    name="Gemma 4 E2B",
    hidden=1536, layers=35, intermediate=6144, heads=8, kv_heads=1, head_dim=256,
    global_head_dim=512, vocab=262_144,
    layer_types=tuple(("sliding",) * 4 + ("full",)) * 7, sliding_window=512,
    tie_embeddings=True, kv_shared_layers=20, double_wide_mlp=True,
    ple_dim=256, ple_vocab=262_144,
    source="google/gemma-4-E2B-it config.json (text_config)",
)

# Model ids the kit serves -> architecture (quantized packages share the architecture; the kit's
# own packages, "package:<scheme>" from harness/package, are built from the E2B sources).
MODELS: dict[str, DecoderArch] = {
    catalog.GEMMA_E2B: GEMMA_4_E2B,
    catalog.GEMMA_E2B_INT4: GEMMA_4_E2B,
    **{f"package:{name}": GEMMA_4_E2B for name in SCHEMES}, "package": GEMMA_4_E2B,
}


def arch_for(model_id: str) -> DecoderArch | None:
    """Architecture of a served model id, or None when the kit does not know it (e.g. Bedrock)."""
    return MODELS.get(model_id)
