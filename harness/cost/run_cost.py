"""Cost of one saved run (results/<run-id>/): ``cost_for_run`` writes its cost.json.

Reads the run through ``harness.results`` (meta.json's endpoints and region, each endpoint's
bench levels), takes the throughputs of each endpoint from its levels (``measured_throughput``)
and builds one row per endpoint with ``harness.cost.rows.cost_row``. Anything missing is named
in the row's ``missing``, never guessed.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from kit import catalog, variants
from harness.bench.metrics import decode_tok_s
from harness.cost import formulas
from harness.cost.prices import PriceBook
from harness.cost.rows import cost_row
from harness.results import endpoints_from_meta, load_bench, read_file, write_file
from kit.contracts.results import COST, META

MEASURED_BY = "this run's load benchmark (bench/<endpoint>/summary.json)"


def level_at(levels: list[dict], concurrency: int) -> dict | None:
    return next((lv for lv in levels if lv.get("concurrency") == concurrency), None)


def measured_throughput(levels: list[dict]) -> dict[str, Any]:
    """The throughputs a cost row needs, from one endpoint's bench levels: the ``output_tok_s``
    of the 1-stream, 16-stream and best levels, and the 1-stream level's decode rate."""
    c1, c16 = level_at(levels, 1), level_at(levels, 16)
    out: dict[str, Any] = {}
    if c1 and c1.get("output_tok_s"):
        out["single_stream_tok_s"] = float(c1["output_tok_s"])
    if c1 and decode_tok_s(c1):
        out["decode_tok_s"] = decode_tok_s(c1)
    if c16 and c16.get("output_tok_s"):
        out["c16_tok_s"] = float(c16["output_tok_s"])
    good = [lv for lv in levels if isinstance(lv.get("output_tok_s"), (int, float)) and lv["output_tok_s"] > 0]
    if good:
        best = max(good, key=lambda lv: lv["output_tok_s"])
        out["best_tok_s"] = float(best["output_tok_s"])
        out["best_at"] = {k: best[k] for k in ("concurrency", "rate") if k in best}
    return out


def service_of(name: str, ep: dict) -> str | None:
    """What bills for an endpoint: meta.json's ``service``; for a run saved before endpoints
    carried it, the catalog backend's of that name (None for any other name)."""
    if "service" in ep:
        return ep["service"]
    b = catalog.BACKENDS.get(name)
    return b.service if b else None


def cost_for_run(results_dir: str | Path, book: PriceBook | None = None, input_per_output: float = 5.0,
                 write: bool = True) -> dict:
    """Price a saved run; writes ``cost.json`` into ``results_dir`` (unless ``write`` is False)
    and returns its content. ``book`` defaults to ``PriceBook.auto()``: live with credentials,
    the dated snapshot without."""
    results_dir = Path(results_dir)
    formulas.positive("input_per_output", input_per_output, allow_zero=True)
    book = book or PriceBook.auto()
    meta = read_file(results_dir / "meta.json", META) or {}
    eps = endpoints_from_meta(meta)
    bench = load_bench(results_dir)
    region = meta.get("region") or "us-east-1"
    reference = book.bedrock(catalog.NOVA_MICRO, region)
    result: dict[str, Any] = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "input_per_output": input_per_output, "price_notes": list(book.notes),
        "bedrock_reference": reference.to_dict(), "endpoints": {}}
    for name in sorted(set(eps) | set(bench)):
        ep, b = eps.get(name, {}), catalog.BACKENDS.get(name)
        model_id = ep.get("model_id") or (b.model_id if b else None)
        # The scheme its model id names (kit/variants.py: a variant g6@bf16 serves bf16 where
        # g6's catalog default is int4); the catalog's precision only for a model it does not name.
        scheme = ep.get("scheme") or variants.scheme_of(model_id)
        row = cost_row(service=service_of(name, ep),
                       instance_type=ep.get("instance_type") or (b.instance_type if b else None),
                       model_id=model_id,
                       precision=ep.get("precision") or variants.precision_of(scheme)
                       or (b.precision if b else None),
                       region=ep.get("region") or region,
                       measured=measured_throughput(bench.get(name, [])), measured_by=MEASURED_BY,
                       book=book, reference=reference, input_per_output=input_per_output)
        if ep.get("variant"):  # a variant stack (kit/variants.py): what tells it from its backend
            row["variant"], row["scheme"] = ep["variant"], scheme
        if name not in bench:
            row["missing"].insert(0, "bench results")
        result["endpoints"][name] = row
    if write:
        write_file(results_dir / "cost.json", COST, result)
    return result
