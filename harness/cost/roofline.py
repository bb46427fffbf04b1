"""Decode roofline: how many tokens/s one stream could reach if the engine were perfect.

One decode step reads the weights it needs (``harness.cost.architecture``) and the KV cache, so a single
stream is bounded by ``memory bandwidth / bytes read per token``. Bandwidth and precision
support come from ``kit.catalog`` (the one source of truth). Measured / ceiling is the
engine's efficiency, the third of the seed's three variables.

    r = roofline("g6.xlarge", "google/gemma-4-E2B-it-qat-w4a16-ct", "int4", context_tokens=512)
    r.ceiling_tok_s, r.efficiency(131.9), r.warnings
    backend_roofline("inf2")     # the catalog's instance, model and precision for a backend

Where the chip widens the precision (int4 on L4, T4G and NeuronCore-v2 is unpacked to 16-bit
before every matmul), ``ceiling_tok_s`` still assumes the stored bytes are what is read, and
``ceiling_tok_s_widened`` gives the bound if the widened 16-bit copy is what gets read (what the
seed saw on Neuron); a warning says which applies.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kit import catalog
from harness.cost import architecture

DEFAULT_CONTEXT_TOKENS = 512  # the seed's Neuron graphs: 512 tokens in total


@dataclass(frozen=True)
class Roofline:
    instance_type: str
    chip: str
    model: str
    precision: str
    embed_precision: str
    context_tokens: int
    weight_bytes_per_token: float
    kv_bytes_per_token: float
    bandwidth_gb_s: float
    measured_bandwidth_gb_s: float | None
    support: str  # how the chip runs this precision (catalog PrecisionSupport) or "unknown"
    ceiling_tok_s_widened: float | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes_per_token + self.kv_bytes_per_token

    @property
    def ceiling_tok_s(self) -> float:
        return self.bandwidth_gb_s * 1e9 / self.bytes_per_token

    @property
    def ceiling_tok_s_measured_bw(self) -> float | None:
        if not self.measured_bandwidth_gb_s:
            return None
        return self.measured_bandwidth_gb_s * 1e9 / self.bytes_per_token

    def efficiency(self, measured_tok_s: float | None) -> float | None:
        if measured_tok_s is None or measured_tok_s <= 0:
            return None
        return measured_tok_s / self.ceiling_tok_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        d.update(bytes_per_token=self.bytes_per_token, ceiling_tok_s=self.ceiling_tok_s,
                 ceiling_tok_s_measured_bw=self.ceiling_tok_s_measured_bw)
        return d


_SUPPORT_WARNINGS = {
    "widened16": ("{p} is widened to 16-bit on {chip} before every matmul; if the widened copy is "
                  "what gets read (as the seed saw on Neuron) the ceiling drops to {w:.0f} tok/s"),
    "emulated": "{p} is emulated on {chip}: expect well below the ceiling",
    "unsupported": "{p} is not supported on {chip}: the engine must convert the weights",
    "hw_only": "{p} exists in {chip} hardware but not yet in its compiler",
}


def roofline(instance_type: str, model_id: str, precision: str, *,
             context_tokens: int = DEFAULT_CONTEXT_TOKENS, embed_precision: str | None = None,
             group_size: int | None = architecture.DEFAULT_GROUP_SIZE) -> Roofline:
    spec = catalog.INSTANCES.get(instance_type)
    if spec is None:
        raise ValueError(f"no bandwidth known for {instance_type!r}; known: {', '.join(sorted(catalog.INSTANCES))}")
    arch = architecture.arch_for(model_id)
    if arch is None:
        raise ValueError(f"no architecture known for model {model_id!r}; known: {', '.join(architecture.MODELS)}")
    if context_tokens < 0:
        raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
    embed_precision = embed_precision or ("bf16" if precision in architecture.GROUP_SCALED else precision)
    weights = arch.weights_read_per_token(precision, embed_precision, group_size)
    kv = arch.kv_read_per_token(context_tokens)
    support = spec.chip.precision.get(precision, "unknown")
    widened = None
    warnings: list[str] = []
    if support == "widened16":
        wide = arch.weights_read_per_token("bf16", "bf16") + kv
        widened = spec.bandwidth_gb_s * 1e9 / wide
    if support in _SUPPORT_WARNINGS:
        msg = _SUPPORT_WARNINGS[support].format(p=precision, chip=spec.chip.name, w=widened or 0)
        if support == "widened16" and spec.chip.int4_slowdown and precision == "int4":
            msg += f" (seed: {spec.chip.int4_slowdown:g}x slower per call than plain bf16)"
        warnings.append(msg)
    return Roofline(instance_type, spec.chip.name, arch.name, precision, embed_precision,
                    context_tokens, weights, kv, spec.bandwidth_gb_s, spec.measured_bandwidth_gb_s,
                    support, widened, tuple(warnings))


def backend_roofline(backend_id: str, *, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                     instance_type: str | None = None, model_id: str | None = None,
                     precision: str | None = None) -> Roofline | None:
    """Roofline of a catalog backend (None for Bedrock: its model and hardware are undisclosed)."""
    b = catalog.backend(backend_id)
    inst = instance_type or b.instance_type
    model_id = model_id or b.model_id
    if inst is None or architecture.arch_for(model_id) is None:
        return None
    return roofline(inst, model_id, precision or b.precision, context_tokens=context_tokens)
