"""Package schemes: per tensor group, the format a package stores it in.

Every scheme is text only (the vision and audio towers are dropped) and stores ``lm_head`` at
most once. The four schemes and what a public reproduction measured for Gemma 4 E2B on one
ml.g6.xlarge L4 with vLLM 0.30.0 (xbill9/sagemaker-gemma,
docs/articles/sagemaker-gemma-formats/devto-sagemaker-gemma-formats.md, "Why the Embeddings
Matter" and "What About FP8 and Int8?"):

| scheme | linears | per-layer table | embed_tokens | lm_head            | GPU weights | decode    |
| text   | int4    | 16-bit          | 16-bit       | tied (16-bit)      | 6.33 GiB    | 103.0 t/s |
| ple4   | int4    | int4            | 16-bit       | tied (16-bit)      | 3.19 GiB    | 104.1 t/s |
| emb4   | int4    | int4            | int4         | untied int4 copy   | 2.86 GiB    | 141.7 t/s |
| int8   | int8    | 16-bit          | 16-bit       | tied (16-bit)      | (W8A8 build: 75.5 t/s) |

``emb4`` unties ``lm_head``: vLLM ties the output layer by reusing the embedding's 16-bit weight,
which a packed table does not have (same article, "Five Ways to Store the Same Weights"), and
vLLM's quantized embedding method supports lookup only (vLLM ``compressed_tensors_embedding.py``,
``CompressedTensorsEmbeddingWNA16Int.apply`` raises), so the package stores ``lm_head`` as its own
int4 linear, a copy of the embedding's integers and scales.

``int8`` starts from the bf16 release and rounds to nearest; it exists for the accuracy
comparison, not for speed (8-bit linears decode at 0.58-0.71x of 4-bit on L4, same article).
"""
from __future__ import annotations

from dataclasses import dataclass

# PackageStack (stacks/package.py) names its CodeBuild project and the SSM parameters holding each
# scheme's newest package from these; harness.package start/list and the g6 boot read the same.
PROJECT_NAME = "inference-kit-package"
PARAMETER_PREFIX = "/inference-kit/package"

# Tensor groups a manifest reports bytes for.
GROUPS = ("linear", "per_layer_embeddings", "token_embeddings", "lm_head", "other")

QAT_SOURCE = "google/gemma-4-E2B-it-qat-q4_0-unquantized"
BF16_SOURCE = "google/gemma-4-E2B-it"


@dataclass(frozen=True)
class Scheme:
    name: str
    linear: str  # "int4" (recovered from the QAT grid) | "int8" (rounded to nearest)
    per_layer_embeddings: str  # "int4" | "bf16"
    token_embeddings: str  # "int4" | "bf16"
    untied_lm_head: bool  # store lm_head as its own (int4) tensor
    source_kind: str  # "qat" | "bf16"
    default_source: str
    summary: str

    def format_of(self, group: str) -> str:
        """Storage format of a tensor group: int4 | int8 | bf16 (16-bit, as in the source)."""
        if group == "linear":
            return self.linear
        if group == "per_layer_embeddings":
            return self.per_layer_embeddings
        if group == "token_embeddings":
            return self.token_embeddings
        if group == "lm_head":
            return self.token_embeddings if self.untied_lm_head else "tied"
        return "bf16"


SCHEMES: dict[str, Scheme] = {
    "emb4": Scheme("emb4", "int4", "int4", "int4", True, "qat", QAT_SOURCE,
                   "int4 linears, int4 per-layer and token embeddings, untied int4 lm_head"),
    "ple4": Scheme("ple4", "int4", "int4", "bf16", False, "qat", QAT_SOURCE,
                   "int4 linears and per-layer table, 16-bit token embeddings (tied lm_head)"),
    "text": Scheme("text", "int4", "bf16", "bf16", False, "qat", QAT_SOURCE,
                   "int4 linears, 16-bit embeddings (tied lm_head), no duplicate lm_head"),
    "int8": Scheme("int8", "int8", "bf16", "bf16", False, "bf16", BF16_SOURCE,
                   "int8 linears rounded to nearest per channel from bf16, 16-bit embeddings"),
}
DEFAULT_SCHEME = "emb4"

# Bytes per stored value; grouped formats add one bf16 scale per group (see bytes_of).
GROUP_SIZE = {"int4": 32, "int8": None}  # int8: one scale per output channel


# A backend serving a package is configured and served as "package" (= package:emb4) or
# "package:<scheme>" (stacks/package.py); the model id the harness sees carries the scheme.
MODEL_WORD = "package"


def scheme_of_model(model_id: str) -> Scheme | None:
    """The scheme a served model id names (None: not a package id; ValueError: unknown scheme)."""
    if model_id != MODEL_WORD and not model_id.startswith(MODEL_WORD + ":"):
        return None
    return scheme(model_id.partition(":")[2] or DEFAULT_SCHEME)


def roofline_args(s: Scheme) -> dict:
    """Precisions for harness.cost.roofline: linears at ``s.linear``, the output layer int4 only
    when the package stores an int4 lm_head (emb4), int4 scales per group of 32. Bytes per token
    from these agree with a manifest's bytes_read_per_token to 0.2% (tests/package)."""
    return {"precision": s.linear, "embed_precision": "int4" if s.untied_lm_head else "bf16",
            "group_size": GROUP_SIZE["int4"] if s.linear == "int4" else None}


def scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown scheme {name!r}; valid: {', '.join(SCHEMES)}") from None


def stored_bytes(fmt: str, shape: tuple[int, ...], source_itemsize: int = 2) -> int:
    """Bytes a tensor of ``shape`` occupies in the package at ``fmt`` (packed values + scales + shape)."""
    n = 1
    for d in shape:
        n *= d
    if fmt == "bf16":
        return n * source_itemsize
    if fmt == "tied":
        return 0
    rows = shape[0]
    if fmt == "int4":
        return n // 2 + (n // GROUP_SIZE["int4"]) * 2 + 2 * 8  # packed + bf16 scales + int64 shape
    if fmt == "int8":
        return n + rows * 2 + 2 * 8
    raise ValueError(f"unknown format {fmt!r}; valid: bf16, int4, int8, tied")
