"""Every file the harness writes into a results directory, its ``schema_version`` and its shape.

One ``ResultsFile`` per file, used by the side that writes it and the sides that read it
(harness/results.py ``write_file``, ``append_record``, ``read_file``, ``read_records``):

    results/<run-id>/                     (harness.run)
      meta.json                           META: versions, config, region, endpoints, stages, times,
                                          the weights each endpoint served (version 2)
      agent_runs.jsonl                    AGENT_RUNS: one record per agent-trial run
      scoreboard.json                     SCOREBOARD: the orchestrating agent's table
      bench/<endpoint>/                   (python -m harness.bench --out, here or on the instance)
        requests.jsonl                    BENCH_REQUESTS: one record per request (also Locust's
                                          requests-<host>-<pid>.jsonl)
        summary.json, summary.csv         BENCH_SUMMARY, BENCH_SUMMARY_CSV: one entry per load level
        bench.json                        BENCH_CONFIG: what was run
      accuracy/                           (harness.accuracy --out, harness.run --accuracy)
        items.jsonl                       ACCURACY_ITEMS: one record per item and backend
        accuracy.json                     ACCURACY: per backend and per pair
        run.json                          ACCURACY_RUN: settings, methods, per-backend status
      cost.json                           COST: one cost row per endpoint
      report.md, report.html              rendered from the files above (no contract: read by people)
    harness.run --json FILE               RUN_SUMMARY (beside the run, where the caller asks)
    calibration.tunnel --json > FILE      TUNNEL_CALIBRATION (docs/measurements/tunnel-*.json)

Versions: a JSON file holds ``"schema_version": N`` as its first key; a JSONL file holds it as
the first key of every record (a file appended to by a resumed run, or several Locust workers'
files read together, stays readable line by line); summary.csv has a ``schema_version`` column.
A file without one was written before versions (version 0): ``legacy`` turns it into today's
shape (summary.json was a bare list of levels), and it still reads and renders. A file of an
older version than this kit's goes through ``older`` (the version it holds says what it means):
the accuracy files' version 2 marks the BOS-offset fix, so a file (a log-likelihood record) of
version 1 or 0 is read with ``"bos_offset": "not corrected"``. A version newer
than this kit's is read as this kit's version, with a note; shapes are open (undeclared keys are
kept, never checked), so a field a newer kit adds does not stop an older report. Raise a
file's ``version`` when a declared field changes meaning or type, and teach ``legacy`` or
``older`` the old one.

Shapes (``TypedDict``, checked by kit/contracts/shape.py) declare what readers rely on; the
writers' own key order is kept, so each file is byte for byte what it was, plus its version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Required, TypedDict

from kit.contracts import shape
from kit.errors import KitError

VERSION_KEY = "schema_version"


class ContractError(KitError, ValueError):
    """A writer asked to write a file that is not of its contract's shape (a bug in the kit)."""

    exit_code = 1


# -- shapes ----------------------------------------------------------------------------------
class Stats(TypedDict, total=False):  # harness.bench.metrics.stats: latency percentiles in ms
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    mean: float | None
    n: int | None


class Level(TypedDict, total=False):
    """One load level of bench/<endpoint>/summary.json (docs/bench.md)."""
    # a level whose load or throughput is not a number is dropped whole (it cannot be placed)
    concurrency: Required[float | None]
    rate: Required[float | None]
    output_tok_s: Required[float | None]
    completed: int | None
    failed: int | None
    errors: dict[str, float]
    ttft_ms: Stats | None
    itl_ms: Stats | None
    tpot_ms: Stats | None
    e2e_ms: Stats | None
    queue_ms: Stats | None
    path_rtt_ms: Stats | None
    slo: dict[str, Any] | None
    complete: bool | None
    level_run: str | None


class Summary(TypedDict, total=False):
    levels: Required[list[Level]]


class SummaryCsvRow(TypedDict, total=False):  # summary.csv: Level flattened (harness.bench.store)
    schema_version: Required[int]


class BenchRequest(TypedDict, total=False):
    """One request of requests.jsonl (harness.bench.record.Record.to_dict, docs/bench.md)."""
    id: str
    ok: bool
    error: str | None
    level_run: str | None


class BenchConfig(TypedDict, total=False):  # bench.json: the run's parameters, as given
    levels_done: list[Any]


class SavedEndpoint(TypedDict, total=False):  # harness.endpoint.Endpoint.to_dict
    name: Required[str]
    protocol: str | None
    service: str | None
    model_id: str | None
    region: str | None
    instance_type: str | None
    variant: str | None
    scheme: str | None
    model_revision: str | None  # stack output ModelRevision (kit/weights.py): a commit or "unpinned"


class ServedWeights(TypedDict, total=False):
    """What one endpoint served (harness/run/weights.py; meta.json version 2). ``model``: the weights'
    repository (a package: its source); ``revision``: the commit (40 hex), absent when not known;
    ``how``: pinned | resolved | image | package | configured (kit/weights.py HOW); ``digest``:
    sha256 over the config and tokenizer files (kit/weights.py file_digest); ``source``: where the
    harness read it; ``error``: why something is missing."""
    model: str | None
    served_as: str | None
    revision: str | None
    how: str | None
    pinned: str | None
    digest: str | None
    files: list[str] | None
    package_manifest: str | None
    precision: str | None
    different_model: bool | None
    source: str | None
    error: str | None


class Meta(TypedDict, total=False):
    run_id: str | None
    started_at: float | str | None  # epoch seconds (runs saved by hand: already a string)
    ended_at: float | str | None
    region: str | None
    argv: list[str] | None
    stages: dict[str, Any] | None
    endpoints: list[SavedEndpoint] | None
    notes: list[str] | None
    versions: dict[str, Any] | None
    config: dict[str, Any] | None
    access: dict[str, str] | None
    bench: dict[str, Any] | None
    interrupted: bool | None
    # version 2: what each endpoint served (harness/run/weights.py); a version-1 run has none
    weights: dict[str, ServedWeights] | None


class AgentRun(TypedDict, total=False):  # harness.agent.trial.RunRecord.to_dict
    backend: Required[str | None]  # a record naming no backend by a string cannot be placed
    run: int | None
    runs: int | None
    ok: bool | None
    quoted: int | None
    seconds: float | None
    error: str | None


class ScoreboardRow(TypedDict, total=False):
    backend: str | None
    answer: str | None
    error: str | None


class Scoreboard(TypedDict, total=False):  # harness.agent.scoreboard.run_scoreboard
    question: str | None
    orchestrator_error: str | None
    seconds: float | None
    rows: Required[list[ScoreboardRow]]


class CostMeasured(TypedDict, total=False):
    decode_tok_s: float | None
    label: str | None
    note: str | None


class CostRoofline(TypedDict, total=False):
    ceiling_tok_s: float | None
    label: str | None
    note: str | None
    warnings: list[str]


class CostPrice(TypedDict, total=False):
    label: str | None
    note: str | None


class CostRow(TypedDict, total=False):  # harness.cost.rows.cost_row
    usd_per_hour: float | None
    usd_per_month_24x7: float | None
    usd_per_m_output_single: float | None
    usd_per_m_output_c16: float | None
    break_even_tok_s: float | None
    efficiency: float | None
    usd_per_m_output_incl_input: float | None
    instance_type: str | None
    precision: str | None
    model_id: str | None
    service: str | None
    kind: str | None  # cost.json before rows carried ``service``
    measured: CostMeasured
    roofline: CostRoofline
    price: CostPrice
    missing: list[str]


class Cost(TypedDict, total=False):  # harness.cost.run_cost.cost_for_run
    generated_at: str | None
    input_per_output: float | None
    price_notes: list[str]
    bedrock_reference: dict[str, Any] | None
    endpoints: Required[dict[str, CostRow]]


class AccuracyItem(TypedDict, total=False):  # harness.accuracy.runner: one item asked of one backend
    backend: str | None
    task: str | None
    id: str | int | float | None
    prompt_hash: str | None
    correct: bool | None
    bos_offset: str | None  # "not corrected": an lm-eval log-likelihood record from before version 2


class AccuracyBackend(TypedDict, total=False):
    n: int | None
    accuracy: float | None
    ci95: list[float | None] | None
    complete: bool | None


class AccuracyPair(TypedDict, total=False):
    a: Required[str]
    b: Required[str]
    n: int | None
    diff: float | None
    ci95: list[float | None] | None
    both: int | None
    a_only: int | None
    b_only: int | None
    neither: int | None
    p_mcnemar: float | None
    min_detectable_diff: float | None


class Accuracy(TypedDict, total=False):  # harness.accuracy.summary.summarize
    backends: dict[str, AccuracyBackend]
    pairs: list[AccuracyPair]
    bos_offset: str | None  # "not corrected": from before version 2 (run.json says which tasks)


class AccuracyRunBackend(TypedDict, total=False):
    model: str | None
    protocol: str | None
    label: str | None
    status: str | None
    asked: str | None
    lm_eval_via: str | None
    not_sent: list[str] | None
    # "not corrected": its log-likelihood task records were scored before the BOS-offset fix
    # (a run.json of version 1 or 0 read now, or a resumed run keeping such records of it)
    bos_offset: str | None


class AccuracySkipped(TypedDict, total=False):  # a task a backend could not run, and why
    backend: Required[str]
    task: Required[str]
    reason: Required[str]


class AccuracyRun(TypedDict, total=False):  # harness.accuracy.cli.run_accuracy (and its --resume)
    settings: dict[str, Any] | None
    methods: Any
    backends: dict[str, AccuracyRunBackend]
    tasks: dict[str, Any] | None
    skipped: list[AccuracySkipped]
    bos_offset: str | None  # "not corrected": version 1 or 0 with log-likelihood tasks (read so)


class RunSummary(TypedDict, total=False):  # harness.run --json FILE
    results_dir: Required[str]
    agent_runs: list[AgentRun]
    scoreboard: Scoreboard | None
    stages: dict[str, Any]
    interrupted: bool


class TunnelLevel(TypedDict, total=False):
    path: Required[str]
    concurrency: Required[int]
    completed: int | None
    failed: int | None
    ttft_ms: Stats
    itl_ms: Stats
    output_tok_s: float | None


class TunnelCalibration(TypedDict, total=False):  # harness.calibration.tunnel --json
    reference: dict[str, Any] | None
    levels: Required[list[TunnelLevel]]
    tunnel_vs_direct: list[dict[str, Any]]


# -- files ------------------------------------------------------------------------------------
def _levels(raw: Any) -> Any:
    return {"levels": raw} if isinstance(raw, list) else raw  # summary.json was a bare list


def _scoreboard(raw: Any) -> Any:
    if isinstance(raw, list):
        return {"rows": raw}
    if isinstance(raw, dict) and "rows" not in raw and isinstance(raw.get("table"), list):
        return {k: v for k, v in raw.items() if k != "table"} | {"rows": raw["table"]}
    return raw


def _meta(raw: Any) -> Any:
    """Endpoints saved as a name-keyed object, and ``kind`` for what is now ``protocol``."""
    if not isinstance(raw, dict):
        return raw
    eps = raw.get("endpoints")
    if isinstance(eps, dict):
        eps = [{"name": k} | v for k, v in eps.items() if isinstance(v, dict)]
    if isinstance(eps, list):
        eps = [{k: v for k, v in e.items() if k != "kind"} | {"protocol": e["kind"]}
               if isinstance(e, dict) and "protocol" not in e and "kind" in e else e for e in eps]
        raw = raw | {"endpoints": eps}
    return raw


@dataclass(frozen=True)
class ResultsFile:
    name: str  # where it is, inside a results directory
    shape: type  # a TypedDict: the whole file (JSON), or one record (JSONL) or row (CSV)
    what: str
    version: int = 1
    form: str = "json"  # json | jsonl | csv
    # a file (JSONL: a record) from before schema_version -> today's shape; applied to version 0
    legacy: Callable[[Any], Any] | None = None
    # a file (record) of a version below ``version`` -> as this kit reads it (marked), given that version
    older: Callable[[dict[str, Any], int], dict[str, Any]] | None = None

    def stamp(self, data: dict[str, Any], *, check: bool = True) -> dict[str, Any]:
        """``data`` as written: ``schema_version`` first, then the writer's keys in its order.
        ``ContractError`` when ``data`` is not of the shape (``check=False``: the bench's hot
        path, one record per request; its records are checked by the tests)."""
        if check:
            found = shape.problems(self.shape, data)
            if found:
                more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                raise ContractError(f"{self.name}: {found[0]}{more}")
        out = {VERSION_KEY: self.version}
        out.update(data)
        out[VERSION_KEY] = self.version
        return out

    def version_of(self, raw: dict[str, Any], where: str, notes: list[str] | None) -> int:
        v = raw.get(VERSION_KEY, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            _add(notes, f"{where}: schema_version {v!r:.40} is not a whole number: read as version {self.version}")
            return self.version
        if v > self.version:
            _add(notes, f"{where}: written by a newer kit (schema_version {v}; this kit reads up to "
                        f"{self.version}): fields it does not know are ignored")
        return v

    def read(self, raw: Any, where: str = "", notes: list[str] | None = None, *,
             label: str = "fields", bad: list[str] | None = None) -> dict[str, Any] | None:
        """The reader's copy of one file's (or record's) parsed JSON: upgraded from version 0,
        wrong-typed fields cleaned (kit/contracts/shape.py ``clean``) with one note naming them
        (``label`` says what they are), None when it cannot be read at all (not an object, a
        required field wrong) with a note saying so. ``bad``: collect the paths instead of noting."""
        if self.legacy is not None and not (isinstance(raw, dict) and VERSION_KEY in raw):
            raw = self.legacy(raw)
        if not isinstance(raw, dict):
            _add(notes, f"{where}: skipped (not a JSON object)")
            return None
        v = self.version_of(raw, where, notes)
        if self.older is not None and v < self.version:
            raw = self.older(raw, v)
        found: list[str] = []
        try:
            data = shape.clean(self.shape, raw, found)
        except shape.Invalid as e:
            _add(notes, f"{where}: skipped ({e} is not {_want(self.shape, str(e))})")
            return None
        if bad is not None:
            bad += found
        elif found:
            _add(notes, f"{where}: wrong-typed {label} ignored: {', '.join(found[:8])}"
                        + (f" and {len(found) - 8} more" if len(found) > 8 else ""))
        return data


def _want(td: type, path: str) -> str:
    t = shape.hints(td).get(path.split(".")[0].split("[")[0])
    return shape.name(t) if t is not None else "of its type"


def _add(notes: list[str] | None, line: str) -> None:
    if notes is not None:
        notes.append(line)


META = ResultsFile("meta.json", Meta, "versions, config, region, endpoints, stages, start and end, weights served",
                   version=2, legacy=_meta)
AGENT_RUNS = ResultsFile("agent_runs.jsonl", AgentRun, "one record per agent-trial run", form="jsonl")
SCOREBOARD = ResultsFile("scoreboard.json", Scoreboard, "the scoreboard agent's table", legacy=_scoreboard)
BENCH_REQUESTS = ResultsFile("bench/<endpoint>/requests.jsonl", BenchRequest, "one record per request",
                             form="jsonl")
BENCH_SUMMARY = ResultsFile("bench/<endpoint>/summary.json", Summary, "one entry per load level", legacy=_levels)
BENCH_SUMMARY_CSV = ResultsFile("bench/<endpoint>/summary.csv", SummaryCsvRow, "summary.json, flat", form="csv")
BENCH_CONFIG = ResultsFile("bench/<endpoint>/bench.json", BenchConfig, "what was run: endpoint, profile, plan")
# The accuracy files' version 2: lm-eval's log-likelihoods are read past the BOS a server puts
# before a text prompt (harness/accuracy/lmeval.py). Before it, on such a server (Gemma's, under
# vLLM or the kit's Neuron engine), each log-likelihood also held the last context token's.
BOS_NOT_CORRECTED = "not corrected"
LOGLIK_TYPES = ("loglikelihood", "multiple_choice", "loglikelihood_rolling")  # lm-eval output types


def _item_before_bos_fix(raw: dict[str, Any], _v: int) -> dict[str, Any]:
    """An lm-eval log-likelihood record (harness.accuracy.lmeval.records_from_samples: the choice
    ranked first as an integer, the log-likelihoods as a JSON list) from before version 2."""
    ex, resp = raw.get("extracted"), raw.get("response")
    if isinstance(ex, int) and not isinstance(ex, bool) and isinstance(resp, str) and resp.startswith("["):
        return raw | {"bos_offset": BOS_NOT_CORRECTED}
    return raw


def _accuracy_before_bos_fix(raw: dict[str, Any], _v: int) -> dict[str, Any]:
    return raw | {"bos_offset": BOS_NOT_CORRECTED}


def _run_before_bos_fix(raw: dict[str, Any], _v: int) -> dict[str, Any]:
    """run.json from before version 2: marked when it ran a log-likelihood task, and so is each
    backend that was not skipped on every such task."""
    tasks = raw.get("tasks") if isinstance(raw.get("tasks"), dict) else {}
    ll = {leaf for t in tasks.values() if isinstance(t, dict) and isinstance(t.get("leaves"), dict)
          for leaf, kind in t["leaves"].items() if kind in LOGLIK_TYPES}
    if not ll:
        return raw
    skipped = raw.get("skipped") if isinstance(raw.get("skipped"), list) else []
    out = raw | {"bos_offset": BOS_NOT_CORRECTED}
    if isinstance(raw.get("backends"), dict):
        out["backends"] = {
            name: b | {"bos_offset": BOS_NOT_CORRECTED}
            if isinstance(b, dict) and ll - {s.get("task") for s in skipped
                                              if isinstance(s, dict) and s.get("backend") == name} else b
            for name, b in raw["backends"].items()}
    return out


ACCURACY_ITEMS = ResultsFile("accuracy/items.jsonl", AccuracyItem, "one record per item and backend", version=2,
                             form="jsonl", older=_item_before_bos_fix)
ACCURACY = ResultsFile("accuracy/accuracy.json", Accuracy, "per backend and per pair", version=2,
                       older=_accuracy_before_bos_fix)
ACCURACY_RUN = ResultsFile("accuracy/run.json", AccuracyRun, "settings, methods, per-backend status", version=2,
                           older=_run_before_bos_fix)
COST = ResultsFile("cost.json", Cost, "one cost row per endpoint")
RUN_SUMMARY = ResultsFile("--json FILE", RunSummary, "harness.run's summary for scripts")
TUNNEL_CALIBRATION = ResultsFile("tunnel-*.json", TunnelCalibration, "calibration.tunnel --json")

FILES: tuple[ResultsFile, ...] = (META, AGENT_RUNS, SCOREBOARD, BENCH_REQUESTS, BENCH_SUMMARY, BENCH_SUMMARY_CSV,
                                  BENCH_CONFIG, ACCURACY_ITEMS, ACCURACY, ACCURACY_RUN, COST, RUN_SUMMARY,
                                  TUNNEL_CALIBRATION)
