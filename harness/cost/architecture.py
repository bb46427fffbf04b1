"""Model architecture facts the roofline needs: which weights one generated token reads.

The arithmetic (``DecoderArch``: parameters, bytes at rest, bytes read per token, K/V cache) and
the Gemma 4 sizes with their sources live in ``kit/models.py``; this module maps the model ids the
harness sees (the catalog's defaults, the kit's ``package:<scheme>`` ids, any google/gemma-4-* id)
to them. The vision and audio encoders are not read while decoding text and are left out. The
seed's whole-checkpoint sizes (6.32 GiB bf16, 2.85 GiB int4 with int4 embeddings) are kept in
``harness/cost/seed_reference.json``; they are sizes on disk, not bytes read per token.
"""
from __future__ import annotations

from kit import catalog
from kit.schemes import SCHEMES
# The decoder's arithmetic and the Gemma 4 facts live in kit/models.py (the stacks size
# deployments with them too); re-exported here for the roofline and its callers.
from kit.models import (BYTES_PER_WEIGHT, DEFAULT_GROUP_SIZE, GEMMA_4_E2B, GROUP_SCALED,  # noqa: F401
                        DecoderArch, facts_for, weight_bytes)

# Model ids the kit serves -> architecture (quantized packages share the architecture; the kit's
# own packages, "package:<scheme>" from harness/package, are built from the E2B sources).
MODELS: dict[str, DecoderArch] = {
    catalog.GEMMA_E2B: GEMMA_4_E2B,
    catalog.GEMMA_E2B_INT4: GEMMA_4_E2B,
    **{f"package:{name}": GEMMA_4_E2B for name in SCHEMES}, "package": GEMMA_4_E2B,
}


def arch_for(model_id: str) -> DecoderArch | None:
    """Architecture of a served model id (a kit package id, or any google/gemma-4-* id of a size
    kit/models.py knows), or None when the kit does not know it (e.g. Bedrock)."""
    if model_id in MODELS:
        return MODELS[model_id]
    facts = facts_for(model_id)
    return facts.arch if facts else None
