"""Package sizes from a model's config alone: tensor shapes -> groups -> bytes per scheme.

Shapes come from transformers' own Gemma 4 text model built on the meta device (no weights, no
download): ``Gemma4TextModel(Gemma4TextConfig(**text_config))`` (transformers 5.23
``models/gemma4``). Each tensor then goes through the same group and format decisions as the
build (``layout.group_of``, ``Scheme.format_of``, ``schemes.stored_bytes``), so a manifest's bytes
and these agree exactly for the same config.
"""
from __future__ import annotations

from harness.package import layout
from harness.package.errors import PackageError
from harness.package.textconfig import text_config, transformers_config
from kit.schemes import GROUPS, Scheme, stored_bytes


def text_shapes(config: dict, where: str = "config.json") -> dict[str, tuple[int, ...]]:
    """Package tensor names (``model.`` prefix) -> shape, for a Gemma 4 config or text_config.

    The one place shapes come from: ``sizes``, the build's source check and ``check`` all call
    it. The config is checked first (textconfig: types and ranges, so the meta model it builds is
    bounded); ``PackageError`` names what is wrong."""
    import torch
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextModel

    cfg = transformers_config(text_config(config, where), where)
    try:
        with torch.device("meta"):
            model = Gemma4TextModel(cfg)
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as e:
        line = str(e).strip().splitlines()
        raise PackageError(f"{where}: transformers cannot build the Gemma 4 text model it describes: "
                           f"{(line[0] if line else type(e).__name__)[:200]}") from None
    return {f"model.{n}": tuple(t.shape) for n, t in model.state_dict().items()}


def sizes(shapes: dict[str, tuple[int, ...]], s: Scheme) -> dict[str, int]:
    """Bytes per tensor group (and total) of ``s`` for the text model's tensors."""
    out = dict.fromkeys(GROUPS, 0)
    for name, shape in shapes.items():
        g = layout.group_of(name, shape)
        out[g] += stored_bytes(s.format_of(g) if g != "other" else "bf16", shape)
        if name == layout.EMBED and s.untied_lm_head:
            out["lm_head"] += stored_bytes(s.token_embeddings, shape)
    out["total"] = sum(out[g] for g in GROUPS)
    return out


def table_rows(shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Rows (vocabulary entries) of the embedding tables, for reads.bytes_read_per_token."""
    return {layout.group_of(n, s): s[0] for n, s in shapes.items() if n in (layout.EMBED, layout.PLE)}
