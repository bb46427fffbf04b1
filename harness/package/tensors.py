"""The tensors a Gemma 4 config implies, checked against a source checkpoint or a built package.

A package vLLM cannot load, or loads to NaN, must not be built: a source missing a layer's
``q_proj`` or a norm, with a Linear whose shape disagrees with config.json, with a layer the config
does not have, with a 1-D "Linear", NaN/inf anywhere, or untied with no ``lm_head`` would show
only when vLLM loads it on a billing GPU. The expected names and shapes are the ones ``sizes``
uses (harness.package.sizes.text_shapes: transformers' Gemma 4 text model on the meta device),
so there is one source of truth for what a config implies.

The build runs ``source_problems`` and ``non_finite`` before converting anything; ``check`` runs
``package_problems`` and ``non_finite`` on a built package, where a packed Linear is the
compressed-tensors triple (``weight_packed`` int32 [rows, cols * bits / 32], ``weight_scale``
[rows, cols / group] or [rows, 1] per channel, ``weight_shape`` = [rows, cols]: compressed-tensors
0.17.0 ``compressors/pack_quantized/base.py``, as harness.package.build writes it).

Finite values are checked by streaming each tensor in row chunks (bounded memory).
"""
from __future__ import annotations

import re
from pathlib import Path

from harness.package import layout
from harness.package.checkpoint import FLOAT_DTYPES, TensorInfo, row_chunks
from harness.package.ignore import is_embedding

CHUNK_VALUES = 1 << 23  # values per finite-check step (64 MiB of float64 at most)
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _dims(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _extra(name: str, shown: str, info: TensorInfo, layers: int) -> str:
    if len(info.shape) > 2 and ".experts." in name:
        return (f"{shown}: a {len(info.shape)}-D weight (mixture-of-experts experts); this builder packs dense "
                "Gemma 4 checkpoints only (E2B, E4B, 12B, 31B), not 26B A4B")
    m = _LAYER.match(name)
    if m and int(m.group(1)) >= layers:
        return (f"{shown}: layer {m.group(1)}, but config.json has num_hidden_layers {layers} "
                f"(layers 0 to {layers - 1})")
    return f"{shown}: not a tensor of the Gemma 4 text model config.json describes"


def untied(config: dict) -> bool:
    text = config.get("text_config", config)
    return not text.get("tie_word_embeddings", config.get("tie_word_embeddings", True))


def source_problems(found: dict[str, tuple[str, TensorInfo]], expected: dict[str, tuple[int, ...]],
                    config: dict, int4_groups: set[str]) -> list[str]:
    """``found``: package name -> (source name, info) of every tensor the build would write, plus
    ``lm_head.weight`` when the source has one; ``expected``: text_shapes(config);
    ``int4_groups``: tensor groups the scheme recovers an int4 grid for (BF16 only)."""
    mm = any(s.startswith(layout.MM_TEXT_PREFIX) for s, _ in found.values())
    shown = {p: s for p, (s, _) in found.items()}
    layers = config.get("text_config", config)["num_hidden_layers"]
    problems = []
    for name, shape in expected.items():
        if name not in found:
            problems.append(f"{layout.source_name(name, mm)}: missing; config.json implies a {_dims(shape)} tensor")
        elif found[name][1].shape != shape:
            problems.append(f"{shown[name]}: shape {_dims(found[name][1].shape)}; config.json implies {_dims(shape)}")
    embed = expected.get(layout.EMBED)
    if layout.LM_HEAD in found:
        if embed is not None and found[layout.LM_HEAD][1].shape != embed:
            problems.append(f"{layout.LM_HEAD}: shape {_dims(found[layout.LM_HEAD][1].shape)}; the output layer "
                            f"has the token embeddings' shape {_dims(embed)}")
    elif untied(config):
        problems.append(f"{layout.LM_HEAD}: missing; config.json unties the output layer "
                        "(tie_word_embeddings false), so the source must carry its own lm_head.weight")
    for name in sorted(set(found) - set(expected) - {layout.LM_HEAD}):
        problems.append(_extra(name, shown[name], found[name][1], layers))
    for name, (src, info) in found.items():
        if info.dtype not in FLOAT_DTYPES:
            problems.append(f"{src}: dtype {info.dtype}; source weights are {', '.join(FLOAT_DTYPES)}")
        elif info.dtype != "BF16" and layout.group_of(name, info.shape) in int4_groups:
            problems.append(f"{src}: dtype {info.dtype}; the int4 grid is recovered from BF16 values only")
    return problems


def _group_args(module: str, qconfig: dict) -> dict | None:
    """The weights args of the config group that quantizes ``module`` (compressed-tensors matching,
    as harness.package.ignore reads it), or None."""
    for group in (qconfig.get("config_groups") or {}).values():
        targets = group.get("targets") or []
        if any(layout.matches(module, t) for t in targets if t != "Linear") or \
                ("Linear" in targets and not is_embedding(module)):
            return group.get("weights") if isinstance(group.get("weights"), dict) else None
    return None


def _packed_problems(module: str, shape: tuple[int, int], tensors: dict[str, TensorInfo],
                     qconfig: dict, d: Path, read) -> list[str]:
    parts = {p: tensors.get(f"{module}.{p}") for p in layout.PACKED_SUFFIXES}
    absent = [p for p, t in parts.items() if t is None]
    if absent:
        return [f"{module}: has {', '.join(p for p in parts if p not in absent)} but not {', '.join(absent)}"]
    args = _group_args(module, qconfig)
    if args is None:
        return []  # the ignore check says no config group targets it
    bits, strategy, gs = args.get("num_bits"), args.get("strategy"), args.get("group_size")
    rows, cols = shape
    known = bits in (4, 8) and (strategy == "channel" or (strategy == "group" and isinstance(gs, int) and gs > 0))
    if not known or (cols * bits) % 32 or (strategy == "group" and cols % gs):
        return [f"{module}: quantization args num_bits {bits!r}, strategy {strategy!r}, group_size {gs!r} do not "
                f"fit its {_dims(shape)} weight (this check knows int4/int8 in groups or per channel)"]
    want = {"weight_packed": ((rows, cols * bits // 32), ("I32",)),
            "weight_scale": ((rows, cols // gs if strategy == "group" else 1), FLOAT_DTYPES),
            "weight_shape": ((2,), ("I64", "I32"))}
    out = []
    for p, (wshape, dtypes) in want.items():
        t = parts[p]
        if t.shape != wshape or t.dtype not in dtypes:
            out.append(f"{module}.{p}: {t.dtype} {_dims(t.shape)}; a {_dims(shape)} weight at {bits} bits "
                       f"needs {'/'.join(dtypes)} {_dims(wshape)}")
    if not out:
        stored = [int(v) for v in read(parts["weight_shape"], f"{module}.weight_shape").tolist()]
        if stored != [rows, cols]:
            out.append(f"{module}.weight_shape: {stored}; config.json implies {[rows, cols]}")
    return out


def package_problems(tensors: dict[str, TensorInfo], expected: dict[str, tuple[int, ...]], config: dict,
                     qconfig: dict, d: Path, read) -> list[str]:
    """Problems of a built package's tensors (names as written, or a multimodal checkpoint's,
    whose towers are left to the ignore check) against what its config.json implies.
    ``read(info, name)`` loads one small tensor (weight_shape)."""
    mm = layout.is_multimodal(tensors)
    pkg: dict[str, TensorInfo] = {}
    shown: dict[str, str] = {}
    for n, info in tensors.items():
        p = layout.package_name(n, mm)
        if p is not None:
            pkg[p], shown[p] = info, n
    layers = config.get("text_config", config)["num_hidden_layers"]
    problems: list[str] = []
    used: set[str] = set()
    want = dict(expected)
    embed = expected.get(layout.EMBED)
    if embed is not None and (untied(config) or layout.LM_HEAD in pkg or f"lm_head.{layout.PACKED_SUFFIXES[0]}" in pkg):
        want[layout.LM_HEAD] = embed
    for name, shape in want.items():
        module = layout.module_of(name)
        plain = pkg.get(name)
        packable = name.endswith(".weight") and len(shape) == 2
        packed = packable and any(f"{module}.{p}" in pkg for p in layout.PACKED_SUFFIXES)
        if plain is not None and packed:
            problems.append(f"{shown[name]}: stored both as 16-bit and packed")
        if plain is not None:
            used.add(name)
            if plain.shape != shape:
                problems.append(f"{shown[name]}: shape {_dims(plain.shape)}; config.json implies {_dims(shape)}")
            elif plain.dtype not in FLOAT_DTYPES:
                problems.append(f"{shown[name]}: dtype {plain.dtype}; a 16-bit weight is {', '.join(FLOAT_DTYPES)}")
        elif packed:
            used.update(f"{module}.{p}" for p in layout.PACKED_SUFFIXES)
            problems += _packed_problems(module, shape, pkg, qconfig, d, read)
        else:
            what = "config.json unties the output layer (tie_word_embeddings false)" if name == layout.LM_HEAD \
                else f"config.json implies a {_dims(shape)} tensor"
            problems.append(f"{layout.source_name(name, mm)}: missing; {what}")
    for name in sorted(set(pkg) - used):
        problems.append(_extra(name, shown[name], pkg[name], layers))
    return problems


def non_finite(name: str, info: TensorInfo, d: Path) -> str | None:
    """One line when a floating-point tensor holds NaN or inf (streamed in row chunks), else None."""
    import torch

    if info.dtype not in FLOAT_DTYPES:
        return None
    count, first = 0, None
    for r0, part in row_chunks(info, name, d, CHUNK_VALUES):
        bad = ~torch.isfinite(part)
        n = int(bad.sum())
        if n and first is None:
            idx = [int(i) for i in bad.nonzero()[0]]
            value = part[tuple(idx)].item()
            if part.dim() >= 2:
                idx[0] += r0
            where = f"row {idx[0]}, column {idx[1]}" if len(idx) == 2 else f"index {_dims(idx)}"
            first = f"{value} at {where}"
        count += n
    if not count:
        return None
    return f"{name}: {count} non-finite value(s), first {first}; every weight must be a finite number"
