"""Check a compressed-tensors checkpoint's ``ignore`` list against its index, before deploying.

A compressed-tensors config quantizes every ``Linear`` its config groups target ("Linear" matches
every Linear class, compressed-tensors 0.17.0 ``utils/match.py`` ``_match_class``) unless the
module is on ``ignore``. A 16-bit Linear the list does not name makes vLLM look for
``weight_packed`` and fail at load ("There is no module or parameter named
'vision_embedder.patch_dense.weight'", xbill9/sagemaker-gemma
docs/articles/sagemaker-gemma-formats/devto-sagemaker-gemma-formats.md, "The Config Must Name
Every 16-Bit Layer"): a failed SageMaker endpoint takes ~30 minutes to say so, this check seconds.

Rules, per module of the checkpoint index:
- a module with ``weight_packed`` must not be ignored, and a config group must target it;
- a module with a 16-bit 2-D ``weight`` that is a Linear (not an embedding table) must be ignored;
- a 16-bit embedding table must not be targeted by a name pattern (vLLM would quantize it);
- a tied ``lm_head`` (no tensor of its own, an ``nn.Linear`` in the model) must be ignored;
- every ignore entry must name something (a stale entry hides a typo).

Embedding tables are told from Linears by name: a module whose last part contains ``embed`` and
not ``proj`` (``embed_tokens``, ``embed_tokens_per_layer``; ``embedding_projection`` is a Linear).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.package.layout import matches


@dataclass
class IgnoreCheck:
    ok: bool
    quantized_modules: int
    ignored_16bit_linears: list[str]
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "quantized_modules": self.quantized_modules,
                "ignored_16bit_linears": self.ignored_16bit_linears, "problems": self.problems}


def is_embedding(module: str) -> bool:
    leaf = module.rsplit(".", 1)[-1]
    return "embed" in leaf and "proj" not in leaf


def qconfig_problem(qconfig) -> str | None:
    """Why a ``quantization_config`` cannot be read as compressed-tensors' (None: it can)."""
    if not isinstance(qconfig, dict):
        return f"quantization_config is a {type(qconfig).__name__}; expected an object"
    groups = qconfig.get("config_groups") or {}
    if not isinstance(groups, dict) or not all(
            isinstance(g, dict) and isinstance(g.get("targets", []), list)
            and all(isinstance(t, str) for t in g.get("targets", [])) for g in groups.values()):
        return "quantization_config.config_groups: expected an object of groups, each with a list of target names"
    ignore = qconfig.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        return "quantization_config.ignore: expected a list of module names or re: patterns"
    return None


def check_ignore(shapes: dict[str, tuple[int, ...]], qconfig: dict, tied_lm_head: bool) -> IgnoreCheck:
    """``shapes``: every tensor name in the checkpoint index -> shape."""
    ignore = list(qconfig.get("ignore") or [])
    groups = qconfig.get("config_groups") or {}
    targets = [t for g in groups.values() for t in g.get("targets", [])]
    name_targets = [t for t in targets if t != "Linear"]
    linear_targeted = "Linear" in targets

    def ignored(m: str) -> bool:
        return any(matches(m, p) for p in ignore)

    problems: list[str] = []
    used: set[str] = set()
    packed = sorted({n.rsplit(".", 1)[0] for n in shapes if n.endswith(".weight_packed")})
    for m in packed:
        if ignored(m):
            problems.append(f"{m}: stored packed but on the ignore list")
        targeted = any(matches(m, t) for t in name_targets) or (linear_targeted and not is_embedding(m))
        if not targeted:
            problems.append(f"{m}: stored packed but no config group targets it")
    ignored_16 = []
    for n, shape in sorted(shapes.items()):
        if not n.endswith(".weight") or len(shape) != 2:
            continue
        m = n.rsplit(".", 1)[0]
        if is_embedding(m):
            if any(matches(m, t) for t in name_targets):
                problems.append(f"{m}: 16-bit embedding table targeted by a config group")
            continue
        if not linear_targeted:
            continue
        if ignored(m):
            ignored_16.append(m)
        else:
            problems.append(f"{m}: 16-bit Linear not on the ignore list (vLLM would look for {m}.weight_packed)")
    if tied_lm_head and linear_targeted:
        if ignored("lm_head"):
            ignored_16.append("lm_head")
        else:
            problems.append("lm_head: tied to 16-bit embeddings but not on the ignore list")
    modules = {n.rsplit(".", 1)[0] for n in shapes} | ({"lm_head"} if tied_lm_head else set())
    for p in ignore:
        if any(matches(m, p) for m in modules):
            used.add(p)
    for p in ignore:
        if p not in used:
            problems.append(f"ignore entry {p!r} names no module of the checkpoint")
    return IgnoreCheck(not problems, len(packed), sorted(set(ignored_16)), problems)
