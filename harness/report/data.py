"""Everything a report shows, read from the saved files of one run (never from the network).

``load_run(results_dir)`` returns a ``RunData``; each part may be missing and ``missing`` says
which. Cost comes from ``cost.json``; when a run has none, it is computed here from the dated
price snapshot (offline) and the report says so.

The directory may come from someone else: files are read through ``harness.results`` (regular
files inside the directory only, no symlink followed, size and nesting capped), records and
entries of the wrong type are dropped, and every file or entry skipped is one line in
``RunData.notes`` (shown in the report and printed by ``python -m harness.report``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import catalog, variants
from harness.bench import metrics as bench_metrics
from harness.results import endpoints_from_meta, load_bench, read_json, read_jsonl

DEFAULT_SLO_TTFT_P99_MS = 800.0  # seed 004's SLO: P99 TTFT <= 800 ms


class NotAResultsDir(ValueError):
    pass


@dataclass
class RunData:
    path: Path
    meta: dict
    agent_runs: list[dict]
    scoreboard: list[dict]
    bench: dict[str, list[dict]]
    cost: dict | None
    cost_note: str = ""
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # files and entries skipped, one line each
    _names: list[str] | None = field(default=None, init=False, repr=False)  # endpoint_names, once
    _with_variants: set[str] = field(default_factory=set, init=False, repr=False)

    @property
    def run_id(self) -> str:
        rid = self.meta.get("run_id")
        return rid if isinstance(rid, str) and rid else self.path.name

    def _slo(self) -> tuple[float, str]:
        """P99 TTFT objective and where it came from: the run config, the bench, or seed 004."""
        config = self.meta.get("config")
        slo = config.get("slo") if isinstance(config, dict) else None
        if isinstance(slo, dict) and isinstance(slo.get("ttft_p99_ms"), (int, float)) and slo["ttft_p99_ms"] > 0:
            return float(slo["ttft_p99_ms"]), "from the run's configuration"
        for levels in self.bench.values():
            for lv in levels:
                v = (lv.get("slo") or {}).get("ttft_p99_ms") if isinstance(lv.get("slo"), dict) else None
                if isinstance(v, (int, float)) and v > 0:
                    return float(v), "from the benchmark's SLO"
        return DEFAULT_SLO_TTFT_P99_MS, "default, from seed 004"

    @property
    def slo_ttft_p99_ms(self) -> float:
        return self._slo()[0]

    @property
    def slo_origin(self) -> str:
        return self._slo()[1]

    def endpoint_names(self) -> list[str]:
        # Computed once: the tables ask for it (through ``display``) once per row, and a run of
        # 20,000 agent records made that 20,000 scans of 20,000 records (minutes; issue 21 point 9).
        # A RunData is not changed after load_run.
        if self._names is None:
            names = set(self.bench) | set(endpoints_from_meta(self.meta)) | {r.get("backend") for r in self.agent_runs}
            names |= set((self.cost or {}).get("endpoints", {}))
            names.discard(None)
            order = {b: i for i, b in enumerate(catalog.BACKEND_IDS)}
            # a variant (g6@bf16, kit/variants.py) right after its backend
            self._names = sorted(names, key=lambda n: (order.get(variants.split(str(n))[0], len(order)), n))
            self._with_variants = {variants.split(str(n))[0] for n in self._names if variants.SEP in str(n)}
        return list(self._names)

    def display(self, name: str) -> str:
        """How the tables name an endpoint. A backend deployed as variants (``g6@bf16`` ...) and
        its own stack are told apart by model id and scheme: ``g6@bf16 · google/gemma-4-E2B-it
        (bf16)``; any other name is shown as it is."""
        base, variant = variants.split(name)
        self.endpoint_names()
        if variant is None and base not in self._with_variants:
            return name
        ep = endpoints_from_meta(self.meta).get(name) or {}
        cost = ((self.cost or {}).get("endpoints") or {}).get(name)
        cost = cost if isinstance(cost, dict) else {}
        model, scheme = ep.get("model_id") or cost.get("model_id"), ep.get("scheme") or cost.get("scheme")
        return variants.label(name, model if isinstance(model, str) else None,
                              scheme if isinstance(scheme, str) else None)


def _scoreboard_rows(data: Any) -> list[dict]:
    if isinstance(data, dict):
        data = data.get("rows") or data.get("table") or []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def load_run(results_dir: str | Path) -> RunData:
    path = Path(results_dir)
    if not path.is_dir():
        raise NotAResultsDir(f"{path} is not a directory")
    known = ["meta.json", "agent_runs.jsonl", "scoreboard.json", "bench", "cost.json"]
    if not any(os.path.lexists(path / k) for k in known):
        raise NotAResultsDir(f"{path} is not a results directory (none of {', '.join(known)})")
    notes: list[str] = []
    meta = read_json(path / "meta.json", root=path, notes=notes)
    if meta is not None and not isinstance(meta, dict):
        notes.append(f"{path / 'meta.json'}: skipped (not a JSON object)")
    missing = []
    if not isinstance(meta, dict):
        missing.append("meta.json (versions and configuration)")
        meta = {}
    agent = _agent_runs(path, notes)
    if not agent:
        missing.append("agent trial (agent_runs.jsonl)")
    scoreboard = _scoreboard_rows(read_json(path / "scoreboard.json", root=path, notes=notes))
    if not scoreboard:
        missing.append("scoreboard (scoreboard.json)")
    bench = load_bench(path, notes=notes)
    for name, levels in bench.items():
        for lv in levels:
            _clean_level(lv, f"{path / 'bench' / name / 'summary.json'}", notes)
    if not bench:
        missing.append("load benchmark (bench/*/summary.json)")
    cost, note = read_json(path / "cost.json", root=path, notes=notes), ""
    if not isinstance(cost, dict) or not isinstance(cost.get("endpoints"), dict):
        cost, note = _offline_cost(path)
    else:
        cost = clean_cost(cost, str(path / "cost.json"), notes)
    return RunData(path, meta, agent, scoreboard, bench, cost, note, missing, notes)


def _agent_runs(path: Path, notes: list[str]) -> list[dict]:
    runs, dropped = [], 0
    for r in read_jsonl(path / "agent_runs.jsonl", root=path, notes=notes):
        if isinstance(r.get("backend"), str) or r.get("backend") is None:
            runs.append(r)
        else:
            dropped += 1
    if dropped:
        notes.append(f"{path / 'agent_runs.jsonl'}: {dropped} records skipped (backend not a string)")
    return runs


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# cost.json entry fields the report computes with, by the type each must have
_COST_NUMBERS = ("usd_per_hour", "usd_per_month_24x7", "usd_per_m_output_single", "usd_per_m_output_c16",
                 "break_even_tok_s", "efficiency", "usd_per_m_output_incl_input")
_COST_STRINGS = ("instance_type", "precision", "model_id", "service", "kind")
_COST_SUB = {"measured": ("decode_tok_s",), "roofline": ("ceiling_tok_s",), "price": ()}


def clean_cost(cost: dict, where: str, notes: list[str]) -> dict:
    """A copy of cost.json with every entry of the wrong type dropped (and noted): entries that
    are not objects, numbers that are not finite numbers, labels that are not strings."""
    bad: list[str] = []
    ends: dict[str, dict] = {}
    for name, e in cost["endpoints"].items():
        if not isinstance(e, dict):
            bad.append(f"endpoints.{name}")
            continue
        e = dict(e)
        for k in _COST_NUMBERS:
            if e.get(k) is not None and not _num(e[k]):
                bad.append(f"{name}.{k}")
                e[k] = None
        for k in _COST_STRINGS:
            if e.get(k) is not None and not isinstance(e[k], str):
                bad.append(f"{name}.{k}")
                e[k] = None
        for k, numbers in _COST_SUB.items():
            sub = e.get(k)
            if sub is not None and not isinstance(sub, dict):
                bad.append(f"{name}.{k}")
                sub = None
            sub = dict(sub or {})
            for n in numbers:
                if sub.get(n) is not None and not _num(sub[n]):
                    bad.append(f"{name}.{k}.{n}")
                    sub[n] = None
            for n in ("label", "note"):
                if sub.get(n) is not None and not isinstance(sub[n], str):
                    bad.append(f"{name}.{k}.{n}")
                    del sub[n]
            if k == "roofline":
                sub["warnings"] = _strings(sub.get("warnings"), f"{name}.roofline.warnings", bad)
            e[k] = sub
        e["missing"] = _strings(e.get("missing"), f"{name}.missing", bad)
        ends[str(name)] = e
    out = {**cost, "endpoints": ends}
    out["price_notes"] = _strings(cost.get("price_notes"), "price_notes", bad)
    if not _num(cost.get("input_per_output", 5)):
        bad.append("input_per_output")
        out["input_per_output"] = 5
    if bad:
        notes.append(f"{where}: wrong-typed entries ignored: {', '.join(bad[:8])}"
                     + (f" and {len(bad) - 8} more" if len(bad) > 8 else ""))
    return out


def _strings(v: Any, key: str, bad: list[str]) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        bad.append(key)
        return []
    keep = [x for x in v if isinstance(x, str)]
    if len(keep) != len(v):
        bad.append(key)
    return keep


def _clean_level(lv: dict, where: str, notes: list[str]) -> None:
    """Drop a level's fields of the wrong type (in place) so rendering never trips on them."""
    bad = []
    errs = lv.get("errors")
    if errs is not None and not (isinstance(errs, dict) and all(_num(v) for v in errs.values())):
        bad.append("errors")
        lv["errors"] = {}
    for k in ("completed", "failed"):
        if lv.get(k) is not None and not (_num(lv[k]) and float(lv[k]).is_integer()):
            bad.append(k)
            lv[k] = None
    for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms", "path_rtt_ms", "slo"):
        if lv.get(k) is not None and not isinstance(lv[k], dict):
            bad.append(k)
            lv[k] = None
    if bad:
        notes.append(f"{where}: wrong-typed level fields ignored: {', '.join(sorted(set(bad)))}")


def _offline_cost(path: Path) -> tuple[dict | None, str]:
    """Cost computed from the snapshot, in memory: the run's files are left untouched."""
    from harness.cost.prices import PriceBook
    from harness.cost.run_cost import cost_for_run

    book = PriceBook.auto(offline=True)
    try:
        cost = cost_for_run(path, book, 5.0, write=False)
    except Exception as e:  # noqa: BLE001 - a hostile meta.json: the report renders without cost, and says why
        return None, f"cost could not be computed: {type(e).__name__}: {str(e)[:160]}"
    return cost, (f"no cost.json in this run: costs computed offline from the price snapshot dated "
                  f"{book.snapshot['as_of']}")


# -- latency / throughput helpers ---------------------------------------------------------------
def load_label(level: dict) -> str:
    if level.get("concurrency") is not None:
        return f"c={level['concurrency']}"
    if level.get("rate") is not None:
        return f"{level['rate']:g} req/s"
    return "?"


def metric(level: dict, name: str, stat: str) -> float | None:
    m = level.get(name)
    v = m.get(stat) if isinstance(m, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def sweeps(levels: list[dict]) -> list[tuple[str, list[dict]]]:
    """The closed-loop (concurrency) and open-loop (rate) sweeps of one endpoint, each in load order."""
    out = []
    for key in ("concurrency", "rate"):
        sweep = sorted((lv for lv in levels if lv.get(key) is not None), key=lambda lv: lv[key])
        if sweep:
            out.append((key, sweep))
    return out


def knee_index(sweep: list[dict]) -> int | None:
    """Index of the knee in one sweep (load order): the bench's own ``knee`` flag when it wrote
    one, else ``harness.bench.metrics.knee_index`` (the one definition) on the saved levels."""
    if any("knee" in lv for lv in sweep):
        return next((i for i, lv in enumerate(sweep) if lv.get("knee")), None)
    return bench_metrics.knee_index(sweep)


def per_token(row: dict) -> bool:
    """A cost row of a per-token service (Bedrock). cost.json written before rows carried
    ``service`` named it ``kind``, whose value for Bedrock was the same word."""
    return row.get("service", row.get("kind")) == "bedrock"
