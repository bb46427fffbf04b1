"""Everything a report shows, read from the saved files of one run (never from the network).

``load_run(results_dir)`` returns a ``RunData``; each part may be missing and ``missing`` says
which. Cost comes from ``cost.json``; when a run has none, it is computed here from the dated
price snapshot (offline) and the report says so.

The directory may come from someone else: files are read through ``harness.results`` (regular
files inside the directory only, no symlink followed, size and nesting capped), each with its
contract (kit/contracts/results.py: a file from before schema_version upgraded, fields of the
wrong type emptied, records and entries that cannot be placed dropped), and every file or entry
skipped is one line in ``RunData.notes`` (shown in the report and printed by
``python -m harness.report``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kit import catalog, variants
from harness.bench import metrics as bench_metrics
from harness.results import endpoints_from_meta, load_bench, read_file, read_records
from kit.contracts.results import AGENT_RUNS, COST, META, SCOREBOARD
from kit.errors import KitError

DEFAULT_SLO_TTFT_P99_MS = 800.0  # seed 004's SLO: P99 TTFT <= 800 ms


class NotAResultsDir(KitError, ValueError):
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
        # 20,000 agent records made that 20,000 scans of 20,000 records (minutes).
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


def load_run(results_dir: str | Path) -> RunData:
    path = Path(results_dir)
    if not path.is_dir():
        raise NotAResultsDir(f"{path} is not a directory")
    known = ["meta.json", "agent_runs.jsonl", "scoreboard.json", "bench", "cost.json"]
    if not any(os.path.lexists(path / k) for k in known):
        raise NotAResultsDir(f"{path} is not a results directory (none of {', '.join(known)})")
    notes: list[str] = []
    meta = read_file(path / "meta.json", META, root=path, notes=notes)
    missing = []
    if meta is None:
        missing.append("meta.json (versions and configuration)")
        meta = {}
    agent = read_records(path / "agent_runs.jsonl", AGENT_RUNS, root=path, notes=notes)
    if not agent:
        missing.append("agent trial (agent_runs.jsonl)")
    board = read_file(path / "scoreboard.json", SCOREBOARD, root=path, notes=notes)
    scoreboard = board["rows"] if board else []
    if not scoreboard:
        missing.append("scoreboard (scoreboard.json)")
    bench = load_bench(path, notes=notes)  # levels cleaned by their contract there
    if not bench:
        missing.append("load benchmark (bench/*/summary.json)")
    cost, note = read_file(path / "cost.json", COST, root=path, notes=notes, label="entries"), ""
    if cost is None:
        cost, note = _offline_cost(path)
    elif cost.get("input_per_output") is None:
        cost["input_per_output"] = 5  # the cost model's default ratio (harness.cost)
    return RunData(path, meta, agent, scoreboard, bench, cost, note, missing, notes)


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
