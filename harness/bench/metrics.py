"""Metrics derived from raw per-request records only (the dicts in requests.jsonl).

The benchmark writes summary.json with these functions and the report can recompute the same
numbers offline from requests.jsonl. A record (``harness.bench.record``) holds raw monotonic
timestamps only; every number below has exactly one function here (docs/bench.md says the same):

- ``queue_ms(rec)``: send time minus scheduled time (client side).
- ``ttft_ms(rec)``: first token-carrying chunk's arrival minus the request's send time.
- ``itls_ms(rec)``: for every token-carrying chunk after the first, with k tokens arriving a gap
  g after the previous token-carrying chunk, k values of g/k. Pooled over all requests of a level.
- ``tpot_ms(rec)``: (last chunk − first chunk) / (output_tokens − 1), vLLM's definition.
- ``e2e_ms(rec)``: end of the response minus send time.
- ``summarize_level``: window of a level = earliest send to latest end among its measured
  (non-warm-up) requests; ``output_tok_s`` = output tokens of completed requests / window (all
  streams together); ``request_s`` likewise. Only completed requests enter latency and
  throughput; failed ones are counted by class.
- Goodput (per request, like vLLM's ``--goodput``): completed requests whose own TTFT, TPOT,
  e2e and ITL percentile meet every SLO limit, per second of window.
- ``decode_tok_s(level)``: one stream's decode rate, 1000 / the level's median TPOT (prefill
  excluded). Not ``output_tok_s``: that one is tokens of all streams per second of window.
- ``knee_index(sweep)`` / ``mark_knee(levels)``: the knee of a concurrency or rate sweep.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable

from kit.errors import KitError

PCTS = (50, 90, 95, 99)
_SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2e)(?:_p(\d{1,2}(?:\.\d+)?))?_ms$")


class SLOError(KitError, ValueError):
    pass


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    n = len(sorted_values)
    if n == 1:
        return sorted_values[0]
    pos = (n - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(values: Iterable[float]) -> dict[str, Any]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {**{f"p{p}": None for p in PCTS}, "mean": None, "n": 0}
    out: dict[str, Any] = {f"p{p}": round(percentile(vals, p), 3) for p in PCTS}
    out["mean"] = round(sum(vals) / len(vals), 3)
    out["n"] = len(vals)
    return out


# -- one request ----------------------------------------------------------------------------------
def queue_ms(rec: dict) -> float | None:
    if rec.get("t_sent_ns") is None or rec.get("t_scheduled_ns") is None:
        return None
    return (rec["t_sent_ns"] - rec["t_scheduled_ns"]) / 1e6


def ttft_ms(rec: dict) -> float | None:
    us = rec.get("chunk_us") or []
    return us[0] / 1000.0 if us else None


def e2e_ms(rec: dict) -> float | None:
    if rec.get("t_sent_ns") is None or rec.get("t_end_ns") is None:
        return None
    return (rec["t_end_ns"] - rec["t_sent_ns"]) / 1e6


def itls_ms(rec: dict) -> list[float]:
    us, ks = rec.get("chunk_us") or [], rec.get("chunk_tokens") or []
    out: list[float] = []
    prev = None
    for t, k in zip(us, ks):
        if k <= 0:
            continue
        if prev is not None:
            gap = (t - prev) / 1000.0 / k
            out.extend([gap] * k)
        prev = t
    return out


def tokens(value: Any) -> int:
    """A token count from a record: a whole number >= 0, else 0 (a record read back from a file
    may hold anything; a negative count must never make a negative rate)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tpot_ms(rec: dict) -> float | None:
    us = rec.get("chunk_us") or []
    n = tokens(rec.get("output_tokens"))
    if len(us) < 2 or n < 2:
        return None
    return (us[-1] - us[0]) / 1000.0 / (n - 1)


# -- SLO ------------------------------------------------------------------------------------------
def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_p99_ms=800,itl_p99_ms=50,tpot_ms=40,e2e_ms=20000`` → dict; one-line errors."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep or not _SLO_KEY.match(key.strip()):
            raise SLOError(f"--slo {part.strip()!r}: expected METRIC[_pNN]_ms=LIMIT with METRIC one "
                           "of ttft, itl, tpot, e2e (e.g. ttft_p99_ms=800)")
        try:
            limit = float(val)
        except ValueError:
            limit = -1.0
        if not limit > 0 or math.isinf(limit):
            raise SLOError(f"--slo {key.strip()}: limit {val!r} is not a positive number of ms")
        out[key.strip()] = limit
    return out


def _request_value(rec: dict, metric: str, pct: float | None) -> float | None:
    if metric == "ttft":
        return ttft_ms(rec)
    if metric == "tpot":
        return tpot_ms(rec)
    if metric == "e2e":
        return e2e_ms(rec)
    vals = sorted(itls_ms(rec))
    if not vals:
        return 0.0  # a one-chunk answer has no inter-token gap to violate
    return percentile(vals, pct) if pct is not None else sum(vals) / len(vals)


def meets_slo(rec: dict, slo: dict[str, float]) -> bool:
    """Per-request check: its TTFT/TPOT/e2e, and the given percentile (else mean) of its own
    ITLs, each at most the limit. The percentile in ttft/tpot/e2e keys applies to the level."""
    for key, limit in slo.items():
        m = _SLO_KEY.match(key)
        metric, pct = m.group(1), (float(m.group(2)) if m.group(2) else None)
        v = _request_value(rec, metric, pct)
        if v is None or v > limit:
            return False
    return True


def level_slo_met(level: dict, slo: dict[str, float]) -> bool | None:
    """Level-wide check: the level's given percentile (mean when none) of each metric."""
    if not slo:
        return None
    for key, limit in slo.items():
        m = _SLO_KEY.match(key)
        s = level.get(f"{m.group(1)}_ms") or {}
        v = s.get(f"p{m.group(2)}") if m.group(2) else s.get("mean")
        if m.group(2) and m.group(2) not in {str(p) for p in PCTS}:
            v = None
        if v is None or v > limit:
            return False
    return True


# -- one level ------------------------------------------------------------------------------------
def summarize_level(records: list[dict], *, slo: dict[str, float] | None = None) -> dict[str, Any]:
    slo = slo or {}
    measured = [r for r in records if not r.get("warmup")]
    warm = [r for r in records if r.get("warmup")]
    ok = [r for r in measured if r.get("ok")]
    failed = [r for r in measured if not r.get("ok")]
    sent = [r["t_sent_ns"] for r in measured if r.get("t_sent_ns") is not None]
    ends = [r["t_end_ns"] for r in measured if r.get("t_end_ns") is not None]
    window_s = (max(ends) - min(sent)) / 1e9 if sent and ends and max(ends) > min(sent) else 0.0
    itl: list[float] = []
    for r in ok:
        itl.extend(itls_ms(r))
    out_tokens = sum(tokens(r.get("output_tokens")) for r in ok)
    good = [r for r in ok if meets_slo(r, slo)] if slo else ok
    level: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(failed),
        "errors": dict(sorted(Counter(r.get("error") or "unknown" for r in failed).items())),
        "ttft_ms": stats(ttft_ms(r) for r in ok),
        "itl_ms": stats(itl),
        "tpot_ms": stats(tpot_ms(r) for r in ok),
        "e2e_ms": stats(e2e_ms(r) for r in ok),
        "queue_ms": stats(queue_ms(r) for r in measured),
        "output_tok_s": round(out_tokens / window_s, 3) if window_s else 0.0,
        "request_s": round(len(ok) / window_s, 4) if window_s else 0.0,
        "goodput_request_s": round(len(good) / window_s, 4) if window_s else 0.0,
        "goodput_fraction": round(len(good) / len(measured), 4) if measured else 0.0,
        "output_tok_s_peak": peak_per_second(ok, min(sent) if sent else 0),
        "output_tokens": out_tokens,
        "prompt_tokens_mean": _mean(r.get("prompt_tokens") for r in ok),
        "window_s": round(window_s, 3),
        "token_sources": dict(Counter(r.get("output_tokens_source") for r in ok)),
        "chunk_token_sources": dict(Counter(r.get("chunk_tokens_source") for r in ok)),
        "warmup": {"completed": sum(1 for r in warm if r.get("ok")),
                   "failed": sum(1 for r in warm if not r.get("ok"))},
        "slo": slo,
    }
    level["slo_met"] = level_slo_met(level, slo)
    return level


def peak_per_second(ok: list[dict], start_ns: int) -> float:
    """Most output tokens received in any one-second bin of the window (bins from its start)."""
    bins: Counter = Counter()
    for r in ok:
        base = r["t_sent_ns"] - start_ns
        for t, k in zip(r.get("chunk_us") or [], r.get("chunk_tokens") or []):
            bins[(base + t * 1000) // 1_000_000_000] += tokens(k)
    return float(max(bins.values())) if bins else 0.0


def _mean(values: Iterable[Any]) -> float | None:
    v = [x for x in values if x is not None]
    return round(sum(v) / len(v), 1) if v else None


def decode_tok_s(level: dict) -> float | None:
    """One stream's decode rate at this level: 1000 / median TPOT (None without a TPOT)."""
    tpot = level.get("tpot_ms")
    p50 = tpot.get("p50") if isinstance(tpot, dict) else None
    return 1000.0 / p50 if _positive(p50) else None


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _growth(prev: dict, lv: dict) -> tuple[float | None, float | None]:
    """Median e2e latency and output throughput of ``lv`` as factors of ``prev``'s."""
    l0, l1 = (x["e2e_ms"].get("p50") if isinstance(x.get("e2e_ms"), dict) else None
              for x in (prev, lv))
    x0, x1 = prev.get("output_tok_s"), lv.get("output_tok_s")
    lg = l1 / l0 if _positive(l0) and _positive(l1) else None
    xg = x1 / x0 if _positive(x0) and _positive(x1) else None
    return lg, xg


def knee_index(sweep: list[dict]) -> int | None:
    """Index in ``sweep`` (one sweep's levels in load order) of its knee: the highest complete
    level before the first step between complete levels where median e2e latency grew by a
    larger factor than output throughput. Levels cut short (``complete: false``) are skipped."""
    done = [i for i, lv in enumerate(sweep) if lv.get("complete", True)]
    for a, b in zip(done, done[1:]):
        lg, xg = _growth(sweep[a], sweep[b])
        if lg and xg and lg > xg:
            return a
    return None


def mark_knee(levels: list[dict]) -> None:
    """Per sweep (concurrency, rate), by ``knee_index``: adds ``knee`` (bool) and the growth
    factors vs the previous complete level to every complete level, in place."""
    for key in ("concurrency", "rate"):
        sweep = sorted((lv for lv in levels if key in lv and lv.get("complete", True)),
                       key=lambda lv: lv[key])
        k = knee_index(sweep)
        for i, lv in enumerate(sweep):
            lv["knee"] = i == k
            lg, xg = _growth(sweep[i - 1], lv) if i else (None, None)
            lv["latency_growth"] = round(lg, 3) if lg else None
            lv["throughput_growth"] = round(xg, 3) if xg else None
