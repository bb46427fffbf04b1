"""The report's "GPU families" section: the seed's SageMaker G5 / G6 / G6e / G7 comparison, from
a run that benchmarked the same model on several GPU families (``-c sagemaker_instance_types=
ml.g5.xlarge,ml.g6.xlarge,ml.g6e.xlarge,ml.g7e.2xlarge``: one endpoint per type, each benchmarked
under its own name, ``sagemaker@g6e-xlarge``) and their EC2 twins (``-c g6_variants=g5=@g5.xlarge,
g6e=@g6e.xlarge,g7e=@g7e.2xlarge``: variant stacks on those types, ``g6@g5`` ..., kit/variants.py);
any EC2 endpoint on those families counts. Within a family the SageMaker endpoint comes first, then
the EC2 one on the same hardware.

Per endpoint, in family order: TTFT p50, ITL p50 and output tok/s at 1, 16 and 64 concurrent
streams (seed 001's profile), $ per million output tokens at 64 streams (the hourly price over the
measured throughput), the single-stream bandwidth ceiling and the fraction of it the measured
decode rate (1000 / median TPOT at 1 stream) reached. The ceiling is the planner's (kit/fit.py:
peak bandwidth x the tensor-parallel degree the deployment used / bytes read per token at 4096
tokens of context) for a Gemma 4 model, else the cost row's roofline.
"""
from __future__ import annotations

from typing import Any

from harness.bench import metrics as bench_metrics
from harness.report.data import RunData, metric
from harness.results import endpoints_from_meta
from kit import catalog
from kit import fit as kp
from kit.schemes import scheme_of_model

LEVELS = (1, 16, 64)
FAMILY_ORDER = ("g5", "g6", "g6e", "g7e")


def _at(levels: list[dict], conc: int) -> dict | None:
    return next((lv for lv in levels if lv.get("concurrency") == conc), None)


def _three(levels: list[dict], fn) -> str:
    vals = [fn(_at(levels, c)) if _at(levels, c) else None for c in LEVELS]
    return " / ".join("—" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}" for v in vals)


def ceiling(model_id: str | None, instance_type: str, cost_row: dict) -> float | None:
    """One stream's bandwidth ceiling on this deployment (see the module doc)."""
    if model_id:
        try:
            package = scheme_of_model(model_id)
        except ValueError:
            package = None
        source = package.default_source if package else model_id
        choice = kp.choose_model_or_none(source)
        spec = catalog.INSTANCES.get(instance_type)
        if choice is not None and spec is not None and spec.accelerators and not spec.neuron_cores:
            if package:
                choice = kp.choose_model(source, package.linear)
            backend = catalog.backend("sagemaker" if instance_type.startswith("ml.") else "g6")
            return kp.place(backend, spec, choice, kp.DEFAULT_CONTEXT, 1).ceiling_tok_s
    r = cost_row.get("roofline") or {}
    return r.get("ceiling_tok_s") if isinstance(r.get("ceiling_tok_s"), (int, float)) else None


def family_rows(run: RunData) -> list[dict[str, Any]]:
    """One dict per benchmarked endpoint on a G5/G6/G6e/G7e type, in family order."""
    eps = endpoints_from_meta(run.meta)
    costs = (run.cost or {}).get("endpoints") or {}
    out = []
    for name in run.endpoint_names():
        levels = run.bench.get(name) or []
        ep = eps.get(name) or {}
        cost = costs.get(name) if isinstance(costs.get(name), dict) else {}
        itype = ep.get("instance_type") or cost.get("instance_type")
        spec = catalog.INSTANCES.get(itype) if isinstance(itype, str) else None
        if spec is None or spec.family not in FAMILY_ORDER or not any(lv.get("concurrency") for lv in levels):
            continue
        model = ep.get("model_id") or cost.get("model_id")
        top = _at(levels, LEVELS[-1])
        hourly = cost.get("usd_per_hour")
        per_m = (hourly / (top["output_tok_s"] * 3600) * 1e6
                 if isinstance(hourly, (int, float)) and top and top.get("output_tok_s") else None)
        one = _at(levels, 1)
        decode = bench_metrics.decode_tok_s(one) if one else None
        ceil = ceiling(model if isinstance(model, str) else None, itype, cost)
        out.append({"name": name, "family": spec.family, "chip": spec.chip.name, "instance_type": itype,
                    "gpus": spec.accelerators, "model_id": model, "levels": levels, "usd_per_hour": hourly,
                    "usd_per_m_output_c64": per_m, "decode_tok_s": decode, "ceiling_tok_s": ceil,
                    "of_ceiling": decode / ceil if decode and ceil else None})
    return sorted(out, key=lambda r: (FAMILY_ORDER.index(r["family"]), r["gpus"],
                                      not r["instance_type"].startswith("ml."), r["instance_type"], r["name"]))


def families_table(run: RunData) -> tuple[list[str], list[list[str]]]:
    head = ["family", "endpoint", "instance", "TTFT p50 ms (1 / 16 / 64)", "ITL p50 ms (1 / 16 / 64)",
            "output tok/s (1 / 16 / 64)", "$/M out at 64", "ceiling tok/s (1 stream)", "of ceiling"]
    rows = []
    for r in family_rows(run):
        lv = r["levels"]
        rows.append([f"{r['family'].upper()} ({r['chip'].removeprefix('NVIDIA ')})", run.display(r["name"]),
                     f"{r['instance_type']} ({r['gpus']} GPU{'s' if r['gpus'] > 1 else ''})",
                     _three(lv, lambda x: metric(x, "ttft_ms", "p50")),
                     _three(lv, lambda x: metric(x, "itl_ms", "p50")),
                     _three(lv, lambda x: x.get("output_tok_s")),
                     "—" if r["usd_per_m_output_c64"] is None else f"${r['usd_per_m_output_c64']:.3f}",
                     "—" if r["ceiling_tok_s"] is None else f"{r['ceiling_tok_s']:.0f}",
                     "—" if r["of_ceiling"] is None else f"{r['of_ceiling']:.0%}"])
    return head, rows


SECTION = ("families", "GPU families", families_table, None,
           "The same model on each GPU family the run benchmarked (the seed's G5 / G6 / G6e / G7 comparison; "
           "deploy with -c sagemaker_instance_types=ml.g5.xlarge,ml.g6.xlarge,ml.g6e.xlarge,ml.g7e.2xlarge, and the "
           "EC2 twins with -c g6_variants=g5=@g5.xlarge,g6e=@g6e.xlarge,g7e=@g7e.2xlarge). "
           "Medians at 1, 16 and 64 concurrent streams; $/M at 64 streams = hourly price / measured output "
           "rate; ceiling = peak bandwidth x tensor-parallel GPUs / bytes read per token (kit/fit.py); "
           "of ceiling = the 1-stream decode rate (1000 / median TPOT) over it.")
