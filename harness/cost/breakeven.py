"""The plan before spending: per backend, what it costs, what it could do and the output rate at
which it breaks even with Bedrock, from prices and the seed's throughputs alone.

    plan = offline_plan(input_per_output=5.0)          # {backend_id: {...}} from the snapshot
    plan = offline_plan(book=PriceBook.auto())         # live prices when credentials exist
    print(format_plan(plan))

Each backend's object is its ``harness.cost.rows.cost_row`` (the same keys as a run's cost.json
rows) plus the catalog's ``label``: the catalog's instance, model and precision, priced in
``region`` (default: the snapshot entry's own region), with ``measured`` from the seed article
000 (``single_stream_tok_s``, also taken as the decode rate; ``c16_tok_s`` where the seed implies
one). Bedrock's ``usd_per_m_output`` is its list output price (the seed's convention) and
``usd_per_m_output_incl_input`` adds the input tokens that come with each output token.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from kit import catalog
from harness.cost.prices import PriceBook
from harness.cost.rows import cost_row

SEED_REFERENCE_PATH = Path(__file__).with_name("seed_reference.json")
MEASURED_BY = ("seed article 000 (harness/cost/seed_reference.json): one single-stream figure, "
               "used as both the 1-stream throughput and the decode rate")


@lru_cache(maxsize=1)
def seed_reference() -> dict:
    return json.loads(SEED_REFERENCE_PATH.read_text(encoding="utf-8"))


def seed_measured(backend_id: str) -> dict[str, float]:
    """The seed's throughputs for a backend, under a cost row's ``measured`` keys."""
    seeds = seed_reference()
    if catalog.backend(backend_id).service == "bedrock":
        return {"single_stream_tok_s": seeds["bedrock"]["single_stream_tok_s"]}
    out = {}
    tok1 = seeds["backends"].get(backend_id, {}).get("single_stream_tok_s")
    if tok1:
        out["single_stream_tok_s"] = out["decode_tok_s"] = tok1
    tok16 = seeds["c16_tok_s"].get(backend_id)
    if tok16:
        out["c16_tok_s"] = tok16
    return out


def offline_plan(input_per_output: float = 5.0, book: PriceBook | None = None,
                 backends: tuple[str, ...] = catalog.BACKEND_IDS, region: str | None = None,
                 backend_regions: Mapping[str, str] | None = None) -> dict:
    """Plan per backend id (see module doc). Without ``book``, prices come from the snapshot.
    ``backend_regions`` (backend id -> region, kit/regions.py) prices each backend where the
    kit deploys it; it wins over ``region``."""
    book = book or PriceBook.auto(offline=True)
    backend_regions = backend_regions or {}
    reference = book.bedrock(catalog.NOVA_MICRO, backend_regions.get("bedrock") or region or "us-east-1")
    plan: dict[str, dict] = {}
    for bid in backends:
        b = catalog.backend(bid)
        where = backend_regions.get(bid) or region or (
            _snapshot_region(book, b.instance_type) if b.instance_type else "us-east-1")
        plan[bid] = {"label": b.label, **cost_row(
            service=b.service, instance_type=b.instance_type, model_id=b.model_id, precision=b.precision,
            region=where, measured=seed_measured(bid), measured_by=MEASURED_BY, book=book,
            reference=reference, input_per_output=input_per_output)}
    return plan


def _snapshot_region(book: PriceBook, instance_type: str) -> str:
    for row in book.snapshot["instances"]:
        if row["instance_type"] == instance_type:
            return row["region"]
    return "us-east-1"


def _fmt(v, spec: str, none: str = "—") -> str:
    return none if v is None else format(v, spec)


def format_plan(plan: dict, input_per_output: float = 5.0, notes: list[str] | None = None) -> str:
    """A fixed-width table for the terminal; every price labelled with its source."""
    head = ("backend", "instance", "$/h", "$/month", "ceiling tok/s", "seed tok/s",
            "$/M out 1", "$/M out 16", "break-even tok/s", "price")
    rows = []
    for bid, r in plan.items():
        per_token = r.get("service") == "bedrock"  # one output price at any concurrency
        one = r.get("usd_per_m_output") if per_token else r.get("usd_per_m_output_single")
        sixteen = r.get("usd_per_m_output") if per_token else r.get("usd_per_m_output_c16")
        rows.append((bid, r.get("instance_type") or r.get("model_id") or "", _fmt(r.get("usd_per_hour"), ".4f"),
                     _fmt(r.get("usd_per_month_24x7"), ",.0f"), _fmt((r.get("roofline") or {}).get("ceiling_tok_s"), ".0f"),
                     _fmt(r["measured"].get("single_stream_tok_s"), ".1f"), _fmt(one, ".2f"),
                     _fmt(sixteen, ".3f"), _fmt(r.get("break_even_tok_s"), ".0f"),
                     (r.get("price") or {}).get("label", "")))
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) if i < 2 or i == len(head) - 1 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    out = [f"Prices: {n}" for n in notes or []]
    out += [line(head), line(["-" * w for w in widths]), *[line(r) for r in rows], ""]
    bed = next((r for r in plan.values() if r.get("service") == "bedrock" and r.get("usd_per_m_output")), None)
    if bed:
        out.append(f"Bedrock {bed['model_id']}: ${bed['usd_per_m_input']}/M input, ${bed['usd_per_m_output']}/M output"
                   f" ({bed['price']['label']}); ${bed['usd_per_m_output_incl_input']:.3f} per M output at "
                   f"{input_per_output:g} input tokens per output token.")
    out.append("Break-even: average output tok/s, 24x7, at which the instance costs the same as Bedrock.")
    out.append("Ceiling: memory bandwidth / bytes read per generated token (harness.cost.roofline).")
    for bid, r in plan.items():
        for w in (r.get("roofline") or {}).get("warnings", []):
            out.append(f"warning ({bid}): {w}")
        note = (r.get("price") or {}).get("note") or ""
        if r.get("instance_type") and (r.get("usd_per_hour") is None or "live lookup failed" in note
                                       or "snapshot price is for" in note):
            out.append(f"note ({bid}): {note}")
    return "\n".join(out)
