"""Everything a report shows, read from the saved files of one run (never from the network).

``load_run(results_dir)`` returns a ``RunData``; each part may be missing and ``missing`` says
which. Cost comes from ``cost.json``; when a run has none, it is computed here from the dated
price snapshot (offline) and the report says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import catalog
from harness.cost.run_cost import endpoints_from_meta, load_bench, read_json
from harness.results import read_jsonl

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

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id") or self.path.name

    @property
    def slo_ttft_p99_ms(self) -> float:
        slo = (self.meta.get("config") or {}).get("slo") or {}
        v = slo.get("ttft_p99_ms") if isinstance(slo, dict) else None
        return float(v) if isinstance(v, (int, float)) and v > 0 else DEFAULT_SLO_TTFT_P99_MS

    @property
    def slo_is_default(self) -> bool:
        slo = (self.meta.get("config") or {}).get("slo")
        return not (isinstance(slo, dict) and slo.get("ttft_p99_ms"))

    def endpoint_names(self) -> list[str]:
        names = set(self.bench) | set(endpoints_from_meta(self.meta)) | {r.get("backend") for r in self.agent_runs}
        names |= set((self.cost or {}).get("endpoints", {}))
        names.discard(None)
        order = {b: i for i, b in enumerate(catalog.BACKEND_IDS)}
        return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _scoreboard_rows(data: Any) -> list[dict]:
    if isinstance(data, dict):
        data = data.get("rows") or data.get("table") or []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def load_run(results_dir: str | Path) -> RunData:
    path = Path(results_dir)
    if not path.is_dir():
        raise NotAResultsDir(f"{path} is not a directory")
    known = ["meta.json", "agent_runs.jsonl", "scoreboard.json", "bench", "cost.json"]
    if not any((path / k).exists() for k in known):
        raise NotAResultsDir(f"{path} is not a results directory (none of {', '.join(known)})")
    meta = read_json(path / "meta.json")
    missing = []
    if not isinstance(meta, dict):
        missing.append("meta.json (versions and configuration)")
        meta = {}
    agent = list(read_jsonl(path / "agent_runs.jsonl"))
    if not agent:
        missing.append("agent trial (agent_runs.jsonl)")
    scoreboard = _scoreboard_rows(read_json(path / "scoreboard.json"))
    if not scoreboard:
        missing.append("scoreboard (scoreboard.json)")
    bench = load_bench(path)
    if not bench:
        missing.append("load benchmark (bench/*/summary.json)")
    cost, note = read_json(path / "cost.json"), ""
    if not isinstance(cost, dict) or "endpoints" not in cost:
        cost, note = _offline_cost(path)
    return RunData(path, meta, agent, scoreboard, bench, cost, note, missing)


def _offline_cost(path: Path) -> tuple[dict | None, str]:
    """Cost computed from the snapshot, in memory: the run's files are left untouched."""
    from harness.cost import run_cost
    from harness.cost.prices import PriceBook

    book = PriceBook.auto(offline=True)
    try:
        cost = run_cost.cost_for_run(path, book, 5.0, write=False)
    except ValueError as e:
        return None, f"cost could not be computed: {e}"
    return cost, (f"no cost.json in this run: costs computed offline from the price snapshot dated "
                  f"{book.snapshot['as_of']}")


# -- latency / throughput helpers ---------------------------------------------------------------
def load_of(level: dict) -> float:
    return float(level.get("concurrency") or level.get("rate") or 0)


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


def knee_index(levels: list[dict], latency: str = "e2e_ms") -> int | None:
    """Index (in load order) of the knee: a level flagged ``knee`` by the bench, else the first
    level where median latency grows by a larger factor than output throughput does."""
    ordered = sorted(levels, key=load_of)
    for i, lv in enumerate(ordered):
        if lv.get("knee"):
            return i
    for i in range(1, len(ordered)):
        a, b = ordered[i - 1], ordered[i]
        la, lb = metric(a, latency, "p50"), metric(b, latency, "p50")
        ta, tb = a.get("output_tok_s"), b.get("output_tok_s")
        if la and lb and ta and tb and (lb / la) > (tb / ta):
            return i
    return None
