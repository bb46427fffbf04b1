"""The plan before spending: per backend, what it costs and what it could do, from prices alone.

    plan = offline_plan(input_per_output=5.0)          # {backend_id: {...}} from the snapshot
    plan = offline_plan(book=PriceBook.auto())         # live prices when credentials exist
    print(format_plan(plan))

Each backend object holds ``instance``, ``region``, ``usd_per_hour``, ``usd_per_month_24x7``,
``ceiling_tok_s`` (roofline of the catalog's model and precision on the catalog's instance),
``seed_tok_s`` (single stream, seed article 000), ``usd_per_m_output_single`` and, where the
seed gives a 16-stream throughput, ``usd_per_m_output_c16``, and ``break_even_tok_s`` against
Bedrock at ``input_per_output`` input tokens per output token. ``price_source`` says "live DATE"
or "snapshot DATE" and ``price_note`` where the figure comes from. Bedrock's per-M figures are its
list output price (the seed's convention) and ``usd_per_m_output_incl_input`` adds the input
tokens that come with each output token.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from harness import catalog
from harness.cost import model
from harness.cost.prices import PriceBook, Quote
from harness.cost.roofline import backend_roofline

SEED_REFERENCE_PATH = Path(__file__).with_name("seed_reference.json")


@lru_cache(maxsize=1)
def seed_reference() -> dict:
    return json.loads(SEED_REFERENCE_PATH.read_text(encoding="utf-8"))


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def offline_plan(input_per_output: float = 5.0, book: PriceBook | None = None,
                 backends: tuple[str, ...] = catalog.BACKEND_IDS, region: str | None = None) -> dict:
    """Plan per backend id (see module doc). Without ``book``, prices come from the snapshot."""
    model._positive("input_per_output", input_per_output, allow_zero=True)
    book = book or PriceBook.auto(offline=True)
    seeds = seed_reference()
    bedrock = book.bedrock(catalog.NOVA_MICRO, region or "us-east-1")
    plan: dict[str, dict] = {}
    for bid in backends:
        b = catalog.backend(bid)
        if b.service == "bedrock":
            plan[bid] = _bedrock_row(b, bedrock, input_per_output, seeds)
            continue
        q = book.instance(b.instance_type, region or _snapshot_region(book, b.instance_type))
        seed = seeds["backends"].get(bid, {})
        tok1, tok16 = seed.get("single_stream_tok_s"), seeds["c16_tok_s"].get(bid)
        roof = backend_roofline(bid)
        row = {"label": b.label, "instance": b.instance_type, "region": q.region,
               "usd_per_hour": q.usd_per_hour, "price_source": q.label, "price_note": q.note,
               "precision": b.precision, "ceiling_tok_s": _r(roof and roof.ceiling_tok_s, 1),
               "seed_tok_s": tok1, "seed_efficiency": _r(roof and tok1 and roof.efficiency(tok1), 3),
               "roofline_warnings": list(roof.warnings) if roof else []}
        if q.usd_per_hour is not None:
            row["usd_per_month_24x7"] = round(model.usd_per_month(q.usd_per_hour), 2)
            if tok1:
                row["usd_per_m_output_single"] = round(model.usd_per_m_output(q.usd_per_hour, tok1), 4)
            if tok16:
                row["usd_per_m_output_c16"] = round(model.usd_per_m_output(q.usd_per_hour, tok16), 4)
                row["seed_c16_tok_s"] = tok16
            if bedrock.usd_per_m_output is not None:
                row["break_even_tok_s"] = round(model.break_even_tok_s(
                    q.usd_per_hour, bedrock.usd_per_m_input, bedrock.usd_per_m_output, input_per_output), 1)
                row["break_even_against"] = f"{catalog.NOVA_MICRO} at {input_per_output:g} input tokens per output token"
        plan[bid] = row
    return plan


def _snapshot_region(book: PriceBook, instance_type: str) -> str:
    for row in book.snapshot["instances"]:
        if row["instance_type"] == instance_type:
            return row["region"]
    return "us-east-1"


def _bedrock_row(b: catalog.Backend, q: Quote, ratio: float, seeds: dict) -> dict:
    row = {"label": b.label, "instance": None, "model": b.model_id, "region": q.region,
           "usd_per_hour": None, "usd_per_month_24x7": 0.0, "price_source": q.label, "price_note": q.note,
           "ceiling_tok_s": None, "seed_tok_s": seeds["bedrock"]["single_stream_tok_s"],
           "usd_per_m_input": q.usd_per_m_input, "usd_per_m_output": q.usd_per_m_output}
    if q.usd_per_m_output is not None:
        row["usd_per_m_output_single"] = row["usd_per_m_output_c16"] = q.usd_per_m_output
        row["usd_per_m_output_incl_input"] = round(
            model.bedrock_usd_per_m_output(q.usd_per_m_input, q.usd_per_m_output, ratio), 4)
    return row


def _fmt(v, spec: str, none: str = "—") -> str:
    return none if v is None else format(v, spec)


def format_plan(plan: dict, input_per_output: float = 5.0, notes: list[str] | None = None) -> str:
    """A fixed-width table for the terminal; every price labelled with its source."""
    head = ("backend", "instance", "$/h", "$/month", "ceiling tok/s", "seed tok/s",
            "$/M out 1", "$/M out 16", "break-even tok/s", "price")
    rows = []
    for bid, r in plan.items():
        rows.append((bid, r.get("instance") or r.get("model", ""), _fmt(r.get("usd_per_hour"), ".4f"),
                     _fmt(r.get("usd_per_month_24x7"), ",.0f"), _fmt(r.get("ceiling_tok_s"), ".0f"),
                     _fmt(r.get("seed_tok_s"), ".1f"), _fmt(r.get("usd_per_m_output_single"), ".2f"),
                     _fmt(r.get("usd_per_m_output_c16"), ".3f"), _fmt(r.get("break_even_tok_s"), ".0f"),
                     r.get("price_source", "")))
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) if i < 2 or i == len(head) - 1 else str(c).rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    out = [f"Prices: {n}" for n in notes or []]
    out += [line(head), line(["-" * w for w in widths]), *[line(r) for r in rows], ""]
    bed = next((r for r in plan.values() if r.get("instance") is None and r.get("usd_per_m_output")), None)
    if bed:
        out.append(f"Bedrock {bed['model']}: ${bed['usd_per_m_input']}/M input, ${bed['usd_per_m_output']}/M output"
                   f" ({bed['price_source']}); ${bed['usd_per_m_output_incl_input']:.3f} per M output at "
                   f"{input_per_output:g} input tokens per output token.")
    out.append("Break-even: average output tok/s, 24x7, at which the instance costs the same as Bedrock.")
    out.append("Ceiling: memory bandwidth / bytes read per generated token (harness.cost.roofline).")
    for bid, r in plan.items():
        for w in r.get("roofline_warnings", []):
            out.append(f"warning ({bid}): {w}")
        note = r.get("price_note") or ""
        if r.get("instance") and (r.get("usd_per_hour") is None or "live lookup failed" in note
                                  or "snapshot price is for" in note):
            out.append(f"note ({bid}): {note}")
    return "\n".join(out)
