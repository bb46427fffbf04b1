"""Recover the int4 grid of QAT weights, round bf16 weights to int8, pack integers into int32.

Google's ``-qat-q4_0-unquantized`` checkpoints store 16-bit values that already sit on a 4-bit
grid: each group of 32 consecutive values along a row is ``d * q`` with one scale ``d`` and
integers ``q`` in [-8, 7] (Q4_0's range), rounded once to bfloat16 when the checkpoint was saved
(xbill9/sagemaker-gemma, docs/articles/sagemaker-gemma-formats/devto-sagemaker-gemma-formats.md,
"Why Repack the QAT Weights?").

Recovery, per group, is exact and decided without tolerances:

1. The value of largest magnitude is an anchor: llama.cpp's Q4_0 reference quantizer sets
   ``d = max / -8`` with ``max`` the signed value of largest magnitude (ggml-quants.c,
   ``quantize_row_q4_0_ref``), so that value is ``-8 * d`` and ``d`` is negative when it is
   positive; a positive-scale quantizer clips at 7 or -8 instead. Anchors -8, 7, -7, 6, ... 1, -1
   are tried in turn (largest grid first), the scale taking whichever sign the anchor implies.
   Because multiplying by a power of two commutes with rounding, ``v_max / -8`` is bf16(d).
2. ``q = round(v / s0)``; every ``q`` must lie in [-8, 7].
3. Each stored value ``v`` stands for the interval of reals that round to it in bf16 (half-way
   to its bf16 neighbours). ``q * d`` must fall in that interval for every element, which bounds
   ``d`` from both sides; the group is on the grid iff the intersection of those bounds is not
   empty and excludes zero (elements with ``q == 0`` must be zero). Ties count as inside (closed
   intervals). A negative scale is stored as it is: compressed-tensors' ``dequantize`` and vLLM's
   kernels multiply ``q`` by the scale without taking its magnitude.
4. The stored scale is the smallest bf16 number inside that intersection when there is one (then
   ``bf16(q * s)`` reproduces every value of the group bit for bit), else the bf16 number nearest
   its midpoint (values may then differ by one bf16 step; the build reports the share).

``bf16(q * s)`` is what both compressed-tensors' ``dequantize`` (``x_q.to(scale.dtype) * scale``,
compressed-tensors 0.17.0 ``quantization/lifecycle/forward.py``) and vLLM's kernels compute, since
vLLM keeps ``weight_scale`` in the model's dtype (vLLM ``compressed_tensors_embedding.py``:
``GroupQuantScaleParameter(... dtype=params_dtype)``; output ``q.to(float32) * scale``).

A group that fails step 3 for every anchor is off the grid: the build stops and names it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kit.errors import KitError

GROUP = 32
INT4_MIN, INT4_MAX = -8, 7
_ANCHORS = (-8, 7, -7, 6, -6, 5, -5, 4, -4, 3, -3, 2, -2, 1, -1)
# Scale stored for an all-zero group (any scale reproduces zeros). compressed-tensors clamps a
# zero scale to the dtype's eps the same way (calculate_qparams in quantization/utils/helpers.py).
_ZERO_GROUP_SCALE = torch.finfo(torch.bfloat16).eps


class OffGrid(KitError, ValueError):
    """A group of a QAT tensor is not a scale times integers in [-8, 7]."""

    def __init__(self, tensor: str, row: int, group: int, count: int):
        self.tensor, self.row, self.group, self.count = tensor, row, group, count
        super().__init__(
            f"{tensor}: group {group} of row {row} (columns {group * GROUP}..{group * GROUP + GROUP - 1}) "
            f"is not a scale times integers in [{INT4_MIN}, {INT4_MAX}]; {count} off-grid group(s) in "
            "this tensor; nothing was re-rounded, the build stopped")


@dataclass
class Quantized:
    q: torch.Tensor  # int8, same shape as the weight
    scale: torch.Tensor  # bf16, [rows, cols // group] (group) or [rows, 1] (channel)
    bit_identical: int  # values whose dequantized bf16 equals the source bit for bit
    values: int


def _bf16_neighbours(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The next bf16 numbers below and above each bf16 value, as float64."""
    inf = torch.full_like(v, float("inf"))
    return (torch.nextafter(v, -inf).double(), torch.nextafter(v, inf).double())


def _round_up_bf16(x: torch.Tensor) -> torch.Tensor:
    """Smallest bf16 number >= x (x float64)."""
    c = x.to(torch.bfloat16)
    up = torch.nextafter(c, torch.full_like(c, float("inf")))
    return torch.where(c.double() < x, up, c)


def recover_int4(w: torch.Tensor, name: str) -> Quantized:
    """Integers and bf16 scales of a bf16 tensor on the int4 grid (groups of 32 along rows)."""
    if w.dtype != torch.bfloat16:
        raise ValueError(f"{name}: dtype {w.dtype}; the int4 grid is recovered from bfloat16 values only")
    if w.ndim != 2 or w.shape[1] % GROUP:
        raise ValueError(f"{name}: shape {tuple(w.shape)}; need 2-D with columns a multiple of {GROUP}")
    rows, cols = w.shape
    ng = cols // GROUP
    vb = w.reshape(rows, ng, GROUP)
    v = vb.double()
    lo_n, hi_n = _bf16_neighbours(vb)
    lo_v, hi_v = (v + lo_n) / 2, (v + hi_n) / 2  # reals that round to v lie in [lo_v, hi_v]

    absmax, idx = v.abs().max(dim=-1)
    vmax = torch.gather(v, -1, idx.unsqueeze(-1)).squeeze(-1)
    q_out = torch.zeros(rows, ng, GROUP, dtype=torch.int8)
    s_out = torch.full((rows, ng), _ZERO_GROUP_SCALE, dtype=torch.bfloat16)
    done = absmax == 0

    for a in _ANCHORS:
        todo = ~done
        if not bool(todo.any()):
            continue
        s0 = (vmax / a).unsqueeze(-1)
        q = torch.round(v / torch.where(todo.unsqueeze(-1), s0, torch.ones_like(s0)))
        in_range = ((q >= INT4_MIN) & (q <= INT4_MAX)).all(-1)
        nz = q != 0
        qs = torch.where(nz, q, torch.ones_like(q))
        d_a, d_b = lo_v / qs, hi_v / qs  # bounds on d from each element (order flips when q < 0)
        d_lo = torch.where(nz, torch.minimum(d_a, d_b), torch.full_like(v, -float("inf"))).amax(-1)
        d_hi = torch.where(nz, torch.maximum(d_a, d_b), torch.full_like(v, float("inf"))).amin(-1)
        zeros_ok = (nz | (v == 0)).all(-1)
        ok = todo & in_range & zeros_ok & (d_lo <= d_hi) & ((d_lo > 0) | (d_hi < 0))
        if bool(ok.any()):
            d_lo_c = torch.where(ok, d_lo, torch.ones_like(d_lo))
            d_hi_c = torch.where(ok, d_hi, torch.ones_like(d_hi))
            exact = _round_up_bf16(d_lo_c)
            mid = ((d_lo_c + d_hi_c) / 2).to(torch.bfloat16)
            s = torch.where(exact.double() <= d_hi, exact, mid)
            s_out = torch.where(ok, s, s_out)
            q_out = torch.where(ok.unsqueeze(-1), q.to(torch.int8), q_out)
            done = done | ok
    if not bool(done.all()):
        bad = (~done).nonzero()
        r, g = (int(x) for x in bad[0])
        raise OffGrid(name, r, g, int(bad.shape[0]))
    deq = dequantize(q_out.reshape(rows, cols), s_out, GROUP)
    same = int((deq.view(torch.int16) == w.view(torch.int16)).sum())
    return Quantized(q_out.reshape(rows, cols), s_out, same, rows * cols)


def round_int8_per_channel(w: torch.Tensor, name: str) -> Quantized:
    """Symmetric round-to-nearest int8 with one bf16 scale per output row (channel).

    scale = max|row| / 127, rounded to bf16 first so the integers are computed against the
    scale actually stored; q = clamp(round(w / scale), -128, 127).
    """
    if w.ndim != 2:
        raise ValueError(f"{name}: shape {tuple(w.shape)}; int8 rounding takes 2-D weights")
    wf = w.float()
    amax = wf.abs().amax(dim=1, keepdim=True)
    scale = (amax / 127).to(torch.bfloat16)
    scale = torch.where(amax == 0, torch.full_like(scale, _ZERO_GROUP_SCALE), scale)
    q = torch.clamp(torch.round(wf / scale.float()), -128, 127).to(torch.int8)
    deq = dequantize(q, scale, None)
    same = int((deq.view(torch.int16) == w.to(torch.bfloat16).view(torch.int16)).sum())
    return Quantized(q, scale, same, w.numel())


def dequantize(q: torch.Tensor, scale: torch.Tensor, group: int | None) -> torch.Tensor:
    """bf16(q * scale), the value a loader reconstructs (group=None: one scale per row)."""
    rows, cols = q.shape
    if group is None:
        return (q.float() * scale.float()).to(torch.bfloat16)
    out = q.float().reshape(rows, cols // group, group) * scale.float().unsqueeze(-1)
    return out.reshape(rows, cols).to(torch.bfloat16)


def pack_int32(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack signed integers along rows into int32, compressed-tensors' pack-quantized layout.

    Each value is offset to unsigned (``q + 2**(bits-1)``) and value ``i`` of a word sits at bits
    ``i*bits`` (compressed-tensors 0.17.0 ``compressors/pack_quantized/helpers.py``,
    ``pack_to_int32`` with ``packed_dim=1``). Columns must fill whole words.
    """
    per = 32 // bits
    rows, cols = q.shape
    if cols % per:
        raise ValueError(f"cannot pack {cols} columns of {bits}-bit values into whole int32 words")
    u = (q.to(torch.int64) + (1 << (bits - 1))).reshape(rows, cols // per, per)
    shifts = torch.arange(per, dtype=torch.int64) * bits
    words = (u << shifts).sum(-1)
    # Reinterpret the low 32 bits as signed int32.
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)
