"""Cost of one saved run (results/<run-id>/): what ``harness.cost.model.cost_for_run`` does.

Reads ``meta.json`` (endpoints, region) and ``bench/<endpoint>/summary.json`` (levels with
``concurrency`` or ``rate``, ``output_tok_s``, ``tpot_ms``…), prices each endpoint through a
``PriceBook`` and writes ``cost.json``. Anything missing is named in ``missing``, never guessed.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

from harness import catalog, models
from harness.cost import model
from harness.cost.prices import PriceBook
from harness.cost.roofline import roofline
from harness.endpoint import saved_endpoint
from harness.results import write_json


def read_json(path: Path) -> Any | None:
    """Parsed JSON, or None when the file is absent or unreadable (a report must still render)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def endpoints_from_meta(meta: dict) -> dict[str, dict]:
    eps = meta.get("endpoints") or {}
    if isinstance(eps, list):
        return {e["name"]: saved_endpoint(e) for e in eps if isinstance(e, dict) and isinstance(e.get("name"), str)}
    if not isinstance(eps, dict):  # a hand-edited or foreign meta.json: no endpoints, not a crash
        return {}
    return {k: saved_endpoint({"name": k} | v) for k, v in eps.items() if isinstance(v, dict)}


def load_bench(results_dir: Path) -> dict[str, list[dict]]:
    """Endpoint name -> list of levels from bench/<name>/summary.json (unreadable ones skipped)."""
    out: dict[str, list[dict]] = {}
    bench = results_dir / "bench"
    if not bench.is_dir():
        return out
    for d in sorted(p for p in bench.iterdir() if p.is_dir()):
        data = read_json(d / "summary.json")
        if isinstance(data, dict):  # tolerate {"levels": [...]}
            data = data.get("levels")
        if isinstance(data, list):
            out[d.name] = [lv for lv in data if _valid_level(lv)]
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _valid_level(lv: Any) -> bool:
    """A level the cost and the report can use: a dict whose load and throughput, when given,
    are numbers (a hand-edited or foreign summary must not crash the report)."""
    return isinstance(lv, dict) and all(_number(lv[k]) for k in ("concurrency", "rate", "output_tok_s")
                                        if lv.get(k) is not None)


def _p50(metric: Any) -> float | None:
    if isinstance(metric, dict):
        v = metric.get("p50")
        return float(v) if isinstance(v, (int, float)) and v > 0 else None
    return None


def level_at(levels: list[dict], concurrency: int) -> dict | None:
    return next((lv for lv in levels if lv.get("concurrency") == concurrency), None)


def measured_throughput(levels: list[dict]) -> dict[str, Any]:
    """Single-stream, 16-stream and best output tok/s, and single-stream decode speed."""
    c1, c16 = level_at(levels, 1), level_at(levels, 16)
    out: dict[str, Any] = {}
    if c1 and c1.get("output_tok_s"):
        out["single_stream_tok_s"] = float(c1["output_tok_s"])
        tpot = _p50(c1.get("tpot_ms")) or _p50(c1.get("itl_ms"))
        # Decode speed of one stream: 1000 / median time per output token (excludes prefill).
        out["decode_tok_s"] = 1000.0 / tpot if tpot else float(c1["output_tok_s"])
    if c16 and c16.get("output_tok_s"):
        out["c16_tok_s"] = float(c16["output_tok_s"])
    good = [lv for lv in levels if isinstance(lv.get("output_tok_s"), (int, float)) and lv["output_tok_s"] > 0]
    if good:
        best = max(good, key=lambda lv: lv["output_tok_s"])
        out["best_tok_s"] = float(best["output_tok_s"])
        out["best_at"] = {k: best[k] for k in ("concurrency", "rate") if k in best}
    return out


def _describe(name: str, ep: dict, meta: dict) -> dict:
    b = catalog.BACKENDS.get(name)
    # Results saved before endpoints carried ``service`` have none: the catalog entry's then.
    service = ep["service"] if "service" in ep else (b.service if b else None)
    return {"service": service,
            "instance_type": ep.get("instance_type") or (b.instance_type if b else None),
            "model_id": ep.get("model_id") or (b.model_id if b else None),
            "precision": ep.get("precision") or (b.precision if b else None),
            "region": ep.get("region") or meta.get("region") or "us-east-1"}


def cost_for_run(results_dir: Path, book: PriceBook | None, input_per_output: float = 5.0,
                 write: bool = True) -> dict:
    model._positive("input_per_output", input_per_output, allow_zero=True)
    book = book or PriceBook.auto()
    meta = read_json(results_dir / "meta.json") or {}
    eps = endpoints_from_meta(meta)
    bench = load_bench(results_dir)
    region = meta.get("region") or "us-east-1"
    bedrock = book.bedrock(catalog.NOVA_MICRO, region)
    result: dict[str, Any] = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "input_per_output": input_per_output, "price_notes": list(book.notes),
        "bedrock_reference": bedrock.to_dict(), "endpoints": {}}
    for name in sorted(set(eps) | set(bench)):
        d = _describe(name, eps.get(name, {}), meta)
        row: dict[str, Any] = {**d, "measured": measured_throughput(bench.get(name, [])), "missing": []}
        if name not in bench:
            row["missing"].append("bench results")
        m = row["measured"]
        if d["service"] == "bedrock":
            q = book.bedrock(d["model_id"] or catalog.NOVA_MICRO, d["region"])
            row["price"] = q.to_dict()
            if q.usd_per_m_output is not None:
                row["usd_per_m_output"] = q.usd_per_m_output
                row["usd_per_m_output_incl_input"] = model.bedrock_usd_per_m_output(
                    q.usd_per_m_input, q.usd_per_m_output, input_per_output)
                row["usd_per_month_24x7"] = 0.0
        elif d["instance_type"]:
            q = book.instance(d["instance_type"], d["region"])
            row["price"] = q.to_dict()
            if q.usd_per_hour is None:
                row["missing"].append(f"price of {d['instance_type']}")
            else:
                h = q.usd_per_hour
                row["usd_per_hour"] = h
                row["usd_per_month_24x7"] = model.usd_per_month(h)
                for key, tok in (("single", "single_stream_tok_s"), ("c16", "c16_tok_s"), ("best", "best_tok_s")):
                    if m.get(tok):
                        row[f"usd_per_m_output_{key}"] = model.usd_per_m_output(h, m[tok])
                if bedrock.usd_per_m_output is not None:
                    row["break_even_tok_s"] = model.break_even_tok_s(
                        h, bedrock.usd_per_m_input, bedrock.usd_per_m_output, input_per_output)
            if d["model_id"] and models.arch_for(d["model_id"]) and d["instance_type"] in catalog.INSTANCES:
                r = roofline(d["instance_type"], d["model_id"], d["precision"] or "bf16")
                row["roofline"] = r.to_dict()
                row["efficiency"] = r.efficiency(m.get("decode_tok_s"))
            else:
                row["missing"].append("roofline (model or instance not in the catalog)")
        else:
            row["missing"].append("instance type (not in meta.json, not a catalog backend)")
        result["endpoints"][name] = row
    if write:
        write_json(results_dir / "cost.json", result)
    return result
