"""python -m harness plan --model SIZE_OR_CONFIG [--precision P] [--context N] [--concurrency C] [--json]

Where a Gemma 4 size fits before anything is deployed: per backend and candidate instance, the
bytes per accelerator against what it offers, the tensor-parallel degree, the single-stream
bandwidth ceiling, the on-demand price and the $ per million output tokens at that ceiling, and
which kit packages apply. Placements come from kit/fit.py (the stacks size deployments with the
same function); prices from the Price List API when credentials exist, else the dated snapshot
(harness/cost/price_snapshot.json), each labelled. A placement that does not fit is one line with
its numbers.

    python -m harness plan --model 31B
    python -m harness plan --model google/gemma-4-E2B-it-qat-w4a16-ct --concurrency 16
    python -m harness plan --model path/to/config.json --json
"""
from __future__ import annotations

import json
import sys

from harness.cost import formulas
from harness.cost.prices import PriceBook
from kit import catalog
from kit.cli import OneLineParser, one_line_errors
from kit import fit as kp
from kit.schemes import MODEL_WORD, SCHEMES


def packages_for(backend: catalog.Backend, choice: kp.ModelChoice) -> list[str]:
    """Kit packages (harness/package) the backend can serve for this model: they are built from
    Gemma 4 E2B's sources, and only engines that load compressed-tensors int4 serve them."""
    if not backend.loads_packages or not choice.facts or choice.facts.size != "E2B":
        return []
    return [f"{MODEL_WORD}:{name}" for name in SCHEMES]


def price_rows(plan: dict[str, list[kp.Placement]], book: PriceBook, region: str | None) -> dict:
    """Per backend: each placement's dict with its price, $/month and $/M output at the ceiling."""
    out: dict[str, list[dict]] = {}
    for bid, placements in plan.items():
        rows = []
        for p in placements:
            q = book.instance(p.instance_type, region or _snapshot_region(book, p.instance_type))
            chip = catalog.INSTANCES[p.instance_type].chip
            row = p.to_dict() | {"price": q.to_dict(), "usd_per_hour": q.usd_per_hour, "chip": chip.name,
                                 "native_precisions": [k for k, v in chip.precision.items() if v == "native"]}
            if region and q.region != region:  # the snapshot had no price there: another region's
                row["price_region"] = q.region
            if q.usd_per_hour is not None and p.ceiling_tok_s:
                row["usd_per_m_output_at_ceiling"] = formulas.usd_per_m_output(q.usd_per_hour, p.ceiling_tok_s)
            rows.append(row)
        out[bid] = rows
    return out


def region_problem(book: PriceBook, region: str | None) -> str | None:
    """Why ``region`` cannot be priced (None: it can): without live prices (offline, no
    credentials), a region the dated snapshot holds no instance price for would show another
    region's prices under its name."""
    if region is None or book.client is not None:
        return None
    held = sorted({r["region"] for r in book.snapshot["instances"] if r.get("usd_per_hour") is not None})
    if region in held:
        return None
    return (f"--region {region}: the price snapshot (dated {book.snapshot['as_of']}) has no {region} prices "
            f"(it holds {', '.join(held)}); give one of those, price {region} live (AWS credentials, no "
            "--offline), or leave --region out (the snapshot's prices as they are)")


def _snapshot_region(book: PriceBook, instance_type: str) -> str:
    for row in book.snapshot["instances"]:
        if row["instance_type"] == instance_type:
            return row["region"]
    return "us-east-1"


def _f(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def render(choice: kp.ModelChoice, context: int, concurrency: int, priced: dict, notes: list[str]) -> str:
    a = choice.arch
    lines = [f"Plan: {a.name} ({choice.model_id or choice.label}), {choice.precision} weights, "
             f"context {context} x {concurrency} concurrent sequence(s)",
             f"  {a.total_params / 1e9:.2f}B text parameters, {a.active_params / 1e9:.2f}B active per token"
             + (f" ({a.top_k} of {a.experts} experts)" if a.experts else "")
             + f"; {kp.checkpoint_bytes(choice) / 1e9:.1f} GB of weights; one token reads "
             f"{a.weights_read_per_token(choice.precision, choice.embed_precision) / 1e9:.2f} GB + "
             f"{a.kv_read_per_token(context) / 1e9:.3f} GB of K/V"
             + (f" (on the Neuron engine {kp.neuron_kv_read_per_token(choice, context) / 1e9:.3f} GB: every layer's "
                "cache at the compiled length, whatever the token bucket)"
                if choice.facts and any(catalog.backend(b).engine_kind == "neuron" for b in priced) else ""),
             *([f"  figures: {a.source}"] if a.source else []),
             f"  allowances: vLLM uses {kp.GPU_MEMORY_UTILIZATION:.0%} of each GPU, {kp.GPU_RUNTIME_GIB:g} GiB of it "
             "for runtime; Neuron: the kit engine's own checks (85% of 16 GiB per NeuronCore, 4 GB per gather)"]
    lines += [f"  prices: {n}" for n in notes]
    elsewhere = sorted({r["price_region"] for rows in priced.values() for r in rows
                        if r.get("price_region") and r["usd_per_hour"] is not None})
    if elsewhere:
        lines.append(f"  prices: some are {' and '.join(f'{x}' + chr(39) + 's' for x in elsewhere)}, not the "
                     "region asked for (the snapshot has no price there): the price column names them")
    chips = {c.name: c for c in (catalog.INSTANCES[r["instance_type"]].chip for rows in priced.values()
                                 for r in rows)}.values()
    lines += ["  chips (catalog, with sources): " + "; ".join(
        f"{c.name.removeprefix('NVIDIA ')} {_chip_memory(c)}native "
        + " ".join(p for p, v in c.precision.items() if v == "native") for c in sorted(chips, key=lambda c: c.name))]
    head = ("backend", "instance", "TP", "need/device", "budget", "ceiling tok/s", "$/h", "$/M out @ceiling", "price", "packages")
    fit_rows, misfits, notes_out = [], [], []
    for bid, rows in priced.items():
        b = catalog.backend(bid)
        if not b.open_weights:
            misfits.append(f"{bid}: managed ({b.model_id}); serves no open weights")
            continue
        pk = ", ".join(packages_for(b, choice)) or "—"
        for r in rows:
            if not r["deployable"]:
                why = r["reason"] if not r["fits"] else "fits, but " + "; ".join(r["warnings"][-1:])
                misfits.append(f"{bid} {r['instance_type']}: {why}")
                continue
            other = f" ({r['price_region']}'s)" if r.get("price_region") and r["usd_per_hour"] is not None else ""
            fit_rows.append((bid, r["instance_type"], str(r["tp"]), _f(_gb(r["per_device_bytes"]), ".1f") + " GB",
                             _f(_gb(r["per_device_budget"]), ".1f") + " GB", _f(r["ceiling_tok_s"], ".0f"),
                             _f(r["usd_per_hour"], ".4f"), _f(r.get("usd_per_m_output_at_ceiling"), ".3f"),
                             r["price"].get("label", "") + other, pk))
            notes_out += [f"{bid} {r['instance_type']}: {w}" for w in r["warnings"]]
    if fit_rows:
        widths = [max(len(x[i]) for x in [head, *fit_rows]) for i in range(len(head))]
        fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        lines += ["", "Fits (smallest first per backend):", fmt(head), fmt(["-" * w for w in widths]),
                  *[fmt(r) for r in fit_rows]]
    else:
        lines += ["", "Fits nowhere in the catalog."]
    if misfits:
        lines += ["", "Does not fit / cannot serve:", *[f"  {m}" for m in misfits]]
    if notes_out:
        lines += ["", "Notes:", *[f"  {n}" for n in dict.fromkeys(notes_out)]]
    lines += ["", "Ceiling: one stream, peak bandwidth x TP / bytes read per token (weights + K/V); measured speed "
                  "is a fraction of it. $/M out: the hourly price at that ceiling, the best case."]
    return "\n".join(lines)


def configured_fit_lines(context: dict | None = None) -> list[str]:
    """The configured deployments (cdk.json context, or ``context``) against the planner: per
    backend and instance type, whether its model fits, on what TP degree, at what ceiling; the
    smallest type that fits when it does not. For ``make run``'s offline plan."""
    from kit.config import parse
    from kit.regions import read_context
    from kit.schemes import scheme_of_model

    try:
        config = parse(read_context() if context is None else context)
    except ValueError as e:  # ConfigError, or a cdk.json that cannot be read (kit/jsonfile.py)
        return [f"model fit: not planned, the configuration is refused: {e}"]
    lines = [f"model fit (kit/fit.py; max_model_len {config.max_model_len}, one sequence on vLLM, the compiled batch "
             f"of {kp.NEURON_BATCH_SIZE} on Neuron; "
             "python -m harness plan --model SIZE for every instance):"]
    for bc in config.deployments:
        b = catalog.backend(bc.id)
        name = bc.id + (f"[{bc.variant}]" if bc.variant else "")
        try:
            package = scheme_of_model(bc.model_id)
        except ValueError:
            package = None
        model = package.default_source if package else bc.model_id
        if b.open_weights and b.engine_kind == "neuron" and kp.choose_model_or_none(model) is None:
            try:
                kp.check_deploy(bc.id, bc.instance_type, model, config.max_model_len)
            except kp.PlanError as e:
                lines.append(f"  {name:<11} {bc.model_id}: REFUSED: {e}")
                continue
        if not b.open_weights or kp.choose_model_or_none(model) is None:
            lines.append(f"  {name:<11} {bc.model_id}: not a Gemma 4 size the planner knows; deployed as configured")
            continue
        precision = package.linear if package else (b.precision if model == b.model_id else None)
        choice = kp.choose_model(model, precision)
        for itype in bc.instance_types or (bc.instance_type,):
            spec = catalog.INSTANCES.get(itype)
            if spec is None:
                lines.append(f"  {name:<11} {itype:<16} {bc.model_id}: REFUSED: no GPU count or memory in the "
                             "catalog (kit/catalog.py); synth refuses it, as kit/fit.py check_deploy does")
                continue
            n = kp.deploy_concurrency(b)
            p = kp.place(b, spec, choice, config.max_model_len, n)
            if p.deployable:
                lines.append(f"  {name:<11} {itype:<16} {bc.model_id} ({choice.precision}): fits, TP {p.tp}, "
                             f"{_gb(p.per_device_bytes):.1f} of {_gb(p.per_device_budget):.1f} GB per device, "
                             f"ceiling {p.ceiling_tok_s:.0f} tok/s")
            else:
                best = kp.smallest_fit(bc.id, choice, config.max_model_len, n)
                why = p.reason if not p.fits else "; ".join(p.warnings[-1:])
                lines.append(f"  {name:<11} {itype:<16} {bc.model_id} ({choice.precision}): DOES NOT FIT: {why}; "
                             + (f"smallest that fits: {best.instance_type}" if best else "no catalog type fits"))
    return lines


def _chip_memory(c: catalog.Chip) -> str:
    if not c.device_memory_gb:
        return ""
    return f"{c.device_memory_gb:g} GB {c.memory_type} {c.device_bandwidth_gb_s:g} GB/s, "


def _gb(b):
    return None if b is None else b / 1e9


@one_line_errors("plan")
def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m harness plan", description=__doc__.split("\n\n")[1])
    ap.add_argument("--model", required=True, help="E2B, E4B, 12B, 26B-A4B, 31B, a google/gemma-4-* id, or a config.json")
    ap.add_argument("--precision", help="weights: bf16, fp16, fp8, int8, int4 (default: the id's)")
    ap.add_argument("--context", type=int, default=kp.DEFAULT_CONTEXT, help="tokens per sequence (max_model_len)")
    ap.add_argument("--concurrency", type=int, default=1, help="sequences held at once")
    ap.add_argument("--backends", default=",".join(catalog.BACKEND_IDS), help="comma-separated backend ids")
    ap.add_argument("--region", help="price in this region (default: each snapshot entry's own)")
    ap.add_argument("--offline", action="store_true", help="snapshot prices only, no Price List API")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    try:
        if args.region is not None:
            from kit.regions import check_region

            check_region("--region", args.region)  # the pattern, then botocore's list: zz-fake-9, ../../etc
        choice = kp.choose_model(args.model, args.precision)
        ids = tuple(x.strip() for x in args.backends.split(",") if x.strip())
        for bid in ids:
            catalog.backend(bid)
        placements = kp.plan(choice, context=args.context, concurrency=args.concurrency, backends=ids)
    except ValueError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    book = PriceBook.auto(offline=args.offline)
    problem = region_problem(book, args.region)
    if problem:
        print(f"plan: {problem}", file=sys.stderr)
        return 2
    priced = price_rows(placements, book, args.region)
    if args.json:
        a = choice.arch
        json.dump({"model": {"label": choice.label, "model_id": choice.model_id, "name": a.name,
                             "precision": choice.precision, "total_params": a.total_params,
                             "active_params": a.active_params, "weights_bytes": kp.checkpoint_bytes(choice),
                             "source": a.source},
                   "context": args.context, "concurrency": args.concurrency,
                   "assumptions": {"gpu_memory_utilization": kp.GPU_MEMORY_UTILIZATION,
                                   "gpu_runtime_gib": kp.GPU_RUNTIME_GIB, "kv_bytes": kp.KV_BYTES},
                   "price_notes": book.notes,
                   "backends": {bid: {"packages": packages_for(catalog.backend(bid), choice), "placements": rows}
                                for bid, rows in priced.items()}}, sys.stdout, indent=1, default=str)
        print()
    else:
        print(render(choice, args.context, args.concurrency, priced, book.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
