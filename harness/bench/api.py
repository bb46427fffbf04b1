"""The load benchmark as a Python API (``harness.run`` calls this for every endpoint).

    from harness.bench.api import run_bench
    from harness.bench.spec import BenchSpec
    levels = run_bench(endpoint, BenchSpec(profile="agent", concurrency=(1, 16, 64), requests=64,
                                           slo="ttft_p99_ms=800"),
                       out_dir=Path("results/<run-id>/bench/g6"))

What runs is the ``BenchSpec`` (harness/bench/spec.py: every field and its checks); besides it:
  out_dir          gets requests.jsonl, summary.json, summary.csv, bench.json (store.py)
  api_key          OpenAI-compatible servers' bearer token
  client           an injected boto3 client (SageMaker / Bedrock)

Returns the list of levels exactly as written to summary.json, each with ``path_rtt_ms``
{p50, p99, n, how} (harness.bench.path). Raises ``BenchError`` (one-line message) for bad input;
a failing backend never raises, its requests are recorded as failed.
"""
from __future__ import annotations

import asyncio
import gc
import os
import platform
import resource
import time
import uuid
from pathlib import Path
from typing import Any

from harness.bench import metrics, store
from harness.bench.clients import make_client
from harness.bench.load import LevelSpec, run_level
from harness.bench.path import measure_path
from harness.bench.profiles import get_profile
from harness.bench.progress import BenchProgress
from harness.bench.spec import BenchError, BenchSpec
from harness.bench.record import TokenCounter, now_ns
from harness.endpoint import Endpoint
from harness.results import Skipped, appendable_problem, parse_json, read_bytes


def load_tokenizer(path: str | Path | None) -> TokenCounter | None:
    if not path:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise BenchError("--tokenizer needs the optional 'tokenizers' package "
                         "(pip install tokenizers)") from None
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise BenchError(f"--tokenizer {path}: no tokenizer.json there")
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception type for any bad file
        raise BenchError(f"--tokenizer {path}: not a tokenizer.json the 'tokenizers' package can "
                         f"load ({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})") from None

    def count(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

    return count


def saturated(level: dict, first: dict | None) -> bool:
    """An open-loop level is saturated when >5% of its requests fail, its median client queue
    time passes 100 ms (the client or its in-flight cap can't keep up), or its median TTFT is
    over 4x that of the lowest rate (the server's queue is growing)."""
    total = level["completed"] + level["failed"]
    if total and level["failed"] / total > 0.05:
        return True
    q = (level.get("queue_ms") or {}).get("p50")
    if q is not None and q > 100:
        return True
    if first is not None:
        t0, t1 = first["ttft_ms"]["p50"], level["ttft_ms"]["p50"]
        if t0 and t1 and t1 > 4 * t0:
            return True
    return False


def run_bench(endpoint: Endpoint, spec: BenchSpec, *, out_dir: Path | str, api_key: str | None = None,
              client: Any = None) -> list[dict]:
    """Synchronous wrapper of ``run_bench_async`` (uses uvloop when installed)."""
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    return runner(run_bench_async(endpoint, spec, out_dir=out_dir, api_key=api_key, client=client))


async def run_bench_async(endpoint: Endpoint, spec: BenchSpec, *, out_dir: Path | str,
                          api_key: str | None = None, client: Any = None) -> list[dict]:
    if not isinstance(spec, BenchSpec):
        raise BenchError(f"spec {type(spec).__name__}: give a harness.bench.spec.BenchSpec")
    deadline = now_ns() + int(spec.time_limit * 1e9)
    prof = get_profile(spec.profile)
    slo_d = dict(spec.slo)
    request_timeout, seed = spec.request_timeout, spec.seed
    counter = load_tokenizer(spec.tokenizer)
    plan = spec.levels()
    if str(out_dir) == "":
        raise BenchError("--out '': give a directory (an empty path would write into the current one)")

    out = Path(out_dir)
    config = {"endpoint": endpoint.to_dict(), "profile": prof.to_dict(), **spec.record()}
    levels = _prepare_dir(out, config, spec.resume)
    done_keys = {_key(lv) for lv in levels if lv.get("complete")}

    bench_client = make_client(endpoint, client=client, vllm_extras=spec.vllm_extras, api_key=api_key,
                               request_timeout=request_timeout)
    max_c = max([s.concurrency or 0 for s in plan] + [min(spec.max_inflight, 256)])
    writer = store.RecordWriter(out / store.REQUESTS)
    meta = {"endpoint": endpoint.name, "protocol": endpoint.protocol, "model": endpoint.model_id,
            "profile": prof.name}
    path: dict = {}

    async def one(level: LevelSpec, bar: BenchProgress) -> dict | None:
        if _key(level.key()) in done_keys:
            return None
        if now_ns() >= deadline:
            return None
        level_run = uuid.uuid4().hex[:8]
        started = time.time()
        total = level.warmup_count() + level.requests if level.requests else None
        # Objects alive now (earlier levels, imports) move out of the collector's reach, so a
        # full collection during the level is short and cannot stall every stream for ms.
        gc.collect()
        gc.freeze()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        got: list[dict] = []

        def emit(d: dict) -> None:
            got.append(d)
            writer.put(d)

        def summarize(records: list[dict], complete: bool) -> dict:
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            writer.flush()
            cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
            chunks = sum(len(r.get("chunk_us") or ()) for r in records)
            lv = {**level.key(), **metrics.summarize_level(records, slo=slo_d),
                  "complete": complete, "level_run": level_run, "profile": prof.name,
                  "started": started, "ended": time.time(),
                  # is the client itself a bottleneck? (process CPU while the level ran, per chunk)
                  "client_cpu_s": round(cpu, 3), "chunks": chunks,
                  "client_cpu_us_per_chunk": round(cpu / chunks * 1e6, 2) if chunks else None,
                  "path_rtt_ms": path}
            levels[:] = [x for x in levels if _key(x) != _key(lv)] + [lv]
            _order(levels)
            metrics.mark_knee(levels)
            store.write_summary(out, levels)
            return lv

        try:
            res = await run_level(bench_client, prof, level, level_run=level_run, meta=meta,
                                  emit=emit, request_timeout=request_timeout,
                                  deadline_ns=deadline, seed=seed, max_inflight=spec.max_inflight,
                                  token_counter=counter, on_progress=bar.level(level.label, total))
        except asyncio.CancelledError:  # Ctrl-C: what the cut level measured is summarized too
            summarize(got, complete=False)
            raise
        return summarize(res.records, complete=not res.interrupted)

    try:
        await bench_client.start(max_c)  # inside: a failing start still closes what it opened
        # the probes count against the time limit: at most a tenth of it (>= 1 s), 30 s at most
        left = max((deadline - now_ns()) / 1e9, 0.0)
        path.update(await measure_path(bench_client, spec.path_probes,
                                       limit_s=min(30.0, left, max(1.0, left / 10))))
        with BenchProgress(spec.progress) as bar:
            for level in plan:
                await one(level, bar)
            if spec.auto:
                r, first = spec.rate_start, None
                while r <= spec.rate_max and now_ns() < deadline:
                    level = spec.rate_level(r)
                    lv = await one(level, bar) or next(
                        (x for x in levels if _key(x) == _key(level.key())), None)
                    if lv is None:  # the time limit came between the check and the level
                        break
                    first = first or lv
                    if saturated(lv, first if lv is not first else None):
                        break
                    r *= 2
    finally:
        await bench_client.close()
        try:
            writer.flush()
        finally:
            writer.close()
        done = {_key(x) for x in levels if x.get("complete")}
        store.write_config(out, {**config, "levels_done": sorted(done),
                                        "levels_not_run": [lv.label for lv in plan
                                                           if _key(lv.key()) not in done],
                                        "path_rtt_ms": path,
                                        "python": platform.python_version(),
                                        "updated": time.time()})
    return levels


def _key(d: dict) -> tuple:
    return ("concurrency", d["concurrency"]) if d.get("concurrency") is not None \
        else ("rate", float(d["rate"]))


def _order(levels: list[dict]) -> None:
    levels.sort(key=lambda lv: (0, lv["concurrency"]) if lv.get("concurrency") is not None
                else (1, lv["rate"]))


def _prepare_dir(out: Path, config: dict, resume: bool) -> list[dict]:
    try:
        return _prepare_dir_io(out, config, resume)
    except OSError as e:  # a file as a parent, /proc, read-only, full: one line, not a traceback
        raise BenchError(f"--out {out}: cannot write there ({e.strerror or e})") from None


def _resume_file(out: Path, name: str) -> Any | None:
    """A file of an earlier run, parsed (None when absent); corrupt is a BenchError naming it.
    Read as a results directory's files are (harness.results): a symlink is not followed (one
    to /dev/zero would be read until memory runs out), a FIFO never blocks, the size is capped."""
    path = out / name
    try:
        raw = read_bytes(path)
        return None if raw is None else parse_json(raw)
    except Skipped as e:
        raise BenchError(f"--resume: {path} cannot be read ({e}); move it away "
                         "or use another --out") from None


def _corrupt(path: Path, what: str) -> BenchError:
    return BenchError(f"--resume: {path} is corrupt ({what}); move it away or use another --out")


def _count_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)


def _prepare_dir_io(out: Path, config: dict, resume: bool) -> list[dict]:
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out {out}: exists and is not a directory")
    problem = appendable_problem(out / store.REQUESTS)  # a planted symlink is never written through
    if problem:
        raise BenchError(f"--out: {problem}")
    has_run = os.path.lexists(out / store.REQUESTS) or os.path.lexists(out / store.SUMMARY)
    if has_run and not resume:
        raise BenchError(f"--out {out}: already holds a benchmark; pass --resume to continue it "
                         "or choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    if not resume or not has_run:
        store.write_config(out, config)
        return []
    old = _resume_file(out, store.CONFIG)
    if old is not None:
        if not isinstance(old, dict) or not isinstance(old.get("endpoint", {}), dict):
            raise _corrupt(out / store.CONFIG, "not a benchmark's configuration object")
        for k in ("profile", "requests", "duration"):
            if old.get(k) != config.get(k):
                raise BenchError(f"--resume: {k} was {old.get(k)!r:.80} in {out / store.CONFIG}, now "
                                 f"{config.get(k)!r}; use the same settings or another --out")
        if (old.get("endpoint") or {}).get("model_id") != config["endpoint"]["model_id"]:
            raise BenchError(f"--resume: {out} was run against model "
                             f"{old['endpoint'].get('model_id')!r:.80}, not {config['endpoint']['model_id']!r}")
    levels = store.levels_of(_resume_file(out, store.SUMMARY))
    if levels is None:
        return []
    if not isinstance(levels, list) or not all(isinstance(lv, dict) for lv in levels):
        raise _corrupt(out / store.SUMMARY, "not a list of level objects")
    for lv in levels:
        c, r = lv.get("concurrency"), lv.get("rate")
        if (c is None) == (r is None) or not _count_or_none(c) or not _count_or_none(r):
            raise _corrupt(out / store.SUMMARY, "a level without one numeric concurrency or rate")
    return levels
