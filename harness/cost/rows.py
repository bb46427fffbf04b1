"""One cost row: what one backend or endpoint costs and could do, from prices and throughputs.

``cost_row`` is the only place a cost row is built: the plan (``harness.cost.breakeven``, throughputs
from the seed article) and the cost of a saved run (``harness.cost.run_cost``, throughputs from
its bench) both call it, so both have the same keys and no rounding (tables round for display).

Keys of a row:

- ``service`` ("ec2" | "sagemaker" | "bedrock" | None for a server the kit did not deploy),
  ``instance_type``, ``model_id``, ``precision``, ``region``
- ``measured``: the throughputs the dollars are computed from, each a different quantity:
  ``single_stream_tok_s`` / ``c16_tok_s`` / ``best_tok_s`` (a level's ``output_tok_s``: tokens
  of all streams per second, at 1 stream, 16 streams, and the best level, ``best_at``) and
  ``decode_tok_s`` (one stream's decode rate, ``harness.bench.metrics.decode_tok_s``);
  ``measured_by`` says where they come from
- ``price`` (``Quote.to_dict()``: source, as_of, label, note)
- instances: ``usd_per_hour``, ``usd_per_month_24x7``, ``usd_per_m_output_single`` /
  ``_c16`` / ``_best`` (hourly price over that throughput), ``break_even_tok_s`` and
  ``break_even_against`` (the average 24x7 output rate at which the instance costs what the
  per-token reference would), ``roofline`` (``Roofline.to_dict()``) and ``efficiency``
  (``decode_tok_s`` / ceiling)
- per-token services: ``usd_per_m_input``, ``usd_per_m_output`` (list prices),
  ``usd_per_m_output_incl_input`` (plus the input tokens that come with each output token),
  ``usd_per_month_24x7`` = 0 (nothing bills while idle)
- ``missing``: what could not be computed, and why
"""
from __future__ import annotations

from typing import Any

from kit import catalog
from harness.cost import formulas
from harness.cost.architecture import arch_for
from harness.cost.prices import PriceBook, Quote
from harness.cost.roofline import roofline
from kit.schemes import roofline_args, scheme_of_model

# measured key -> the suffix of the $/M key computed from it
PER_M_OUTPUT = {"single_stream_tok_s": "single", "c16_tok_s": "c16", "best_tok_s": "best"}


def cost_row(*, service: str | None, instance_type: str | None, model_id: str | None,
             precision: str | None, region: str, measured: dict[str, Any], measured_by: str,
             book: PriceBook, reference: Quote, input_per_output: float) -> dict[str, Any]:
    """The cost row of one backend or endpoint (keys: module doc). ``reference`` is the
    per-token service the break-even is computed against (Bedrock Nova Micro)."""
    formulas.positive("input_per_output", input_per_output, allow_zero=True)
    row: dict[str, Any] = {"service": service, "instance_type": instance_type, "model_id": model_id,
                           "precision": precision, "region": region, "measured": measured,
                           "measured_by": measured_by, "missing": []}
    if service == "bedrock":
        q = book.bedrock(model_id or catalog.NOVA_MICRO, region)
        row["price"] = q.to_dict()
        if q.usd_per_m_output is None:
            row["missing"].append(f"price of {q.what}")
            return row
        row.update(usd_per_m_input=q.usd_per_m_input, usd_per_m_output=q.usd_per_m_output,
                   usd_per_m_output_incl_input=formulas.bedrock_usd_per_m_output(
                       q.usd_per_m_input, q.usd_per_m_output, input_per_output),
                   usd_per_month_24x7=0.0)
        return row
    if not instance_type:
        row["missing"].append("instance type (not in meta.json, not a catalog backend)")
        return row
    q = book.instance(instance_type, region)
    row["price"] = q.to_dict()
    if q.usd_per_hour is None:
        row["missing"].append(f"price of {instance_type}")
    else:
        h = q.usd_per_hour
        row["usd_per_hour"] = h
        row["usd_per_month_24x7"] = formulas.usd_per_month(h)
        for key, suffix in PER_M_OUTPUT.items():
            if measured.get(key):
                row[f"usd_per_m_output_{suffix}"] = formulas.usd_per_m_output(h, measured[key])
        if reference.usd_per_m_output is not None:
            row["break_even_tok_s"] = formulas.break_even_tok_s(
                h, reference.usd_per_m_input, reference.usd_per_m_output, input_per_output)
            row["break_even_against"] = (f"{reference.what} at {input_per_output:g} input tokens "
                                         "per output token")
    if model_id and arch_for(model_id) and instance_type in catalog.INSTANCES:
        package = scheme_of_model(model_id)  # a kit package: its scheme's real precisions
        r = roofline(instance_type, model_id, **(roofline_args(package) if package else
                                                   {"precision": precision or "bf16"}))
        row["roofline"] = r.to_dict()
        row["efficiency"] = r.efficiency(measured.get("decode_tok_s"))
    else:
        row["missing"].append("roofline (model or instance not in the catalog)")
    return row
