"""Bytes of weights one decode step reads from a package, from its bytes per tensor group.

A decode step reads every linear layer and norm once, the output layer whole (every vocabulary
entry is scored: ``lm_head`` when the package stores one, else the tied token embeddings), and
one row of each embedding table (a lookup). This is why ``emb4`` is fast and ``ple4`` is not: the
per-layer table is large but only looked up, while ``lm_head`` is read whole every token
(xbill9/sagemaker-gemma, docs/articles/sagemaker-gemma-formats/devto-sagemaker-gemma-formats.md,
"Why the Embeddings Matter"). The roofline (harness/cost) can use this figure for a package
instead of deriving one from a precision label; a manifest carries it as
``bytes_read_per_token``.
"""
from __future__ import annotations


def bytes_read_per_token(groups: dict[str, int], table_rows: dict[str, int]) -> int:
    """``groups``: bytes per tensor group (a manifest's ``bytes``); ``table_rows``: rows of the
    ``token_embeddings`` and ``per_layer_embeddings`` tables (their vocabulary sizes)."""
    head = groups.get("lm_head") or groups.get("token_embeddings", 0)
    lookups = 0
    for g in ("token_embeddings", "per_layer_embeddings"):
        if groups.get(g) and table_rows.get(g):
            lookups += groups[g] // table_rows[g]
    return groups.get("linear", 0) + groups.get("other", 0) + head + lookups
