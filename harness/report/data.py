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

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id") or self.path.name

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
    if not isinstance(meta, dict):
        meta = None
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
    if not isinstance(cost, dict) or not isinstance(cost.get("endpoints"), dict):
        cost, note = _offline_cost(path)
    return RunData(path, meta, agent, scoreboard, bench, cost, note, missing)


def _offline_cost(path: Path) -> tuple[dict | None, str]:
    """Cost computed from the snapshot, in memory: the run's files are left untouched."""
    from harness.cost.prices import PriceBook
    from harness.cost.run_cost import cost_for_run

    book = PriceBook.auto(offline=True)
    try:
        cost = cost_for_run(path, book, 5.0, write=False)
    except ValueError as e:
        return None, f"cost could not be computed: {e}"
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
