"""A synthetic results/<run-id>/ directory in the layout of harness.results (built per test).

By default its files are as the kit wrote them before schema_version (bare ``write_json``,
summary.json a bare list): every report test also proves an old run still renders.
``versioned=True`` writes the same content through the contracts (kit/contracts/results.py)."""
from __future__ import annotations

from pathlib import Path

from harness.results import append_jsonl, append_record, write_file, write_json
from kit.contracts.results import AGENT_RUNS, BENCH_SUMMARY, META, SCOREBOARD


def _lat(p50: float, spread: float = 1.0) -> dict:
    return {"p50": p50, "p90": p50 * (1 + 0.4 * spread), "p95": p50 * (1 + 0.6 * spread),
            "p99": p50 * (1 + spread), "mean": p50 * 1.1, "n": 100}


def _level(conc: int | None, tok_s: float, tpot: float, ttft: float, rate: float | None = None,
           failed: int = 0) -> dict:
    lv = {"completed": 100 - failed, "failed": failed, "errors": {"timeout": failed} if failed else {},
          "ttft_ms": _lat(ttft, 1.5), "itl_ms": _lat(tpot, 0.5), "tpot_ms": _lat(tpot, 0.3),
          "e2e_ms": _lat(ttft + 256 * tpot), "output_tok_s": tok_s, "request_s": tok_s / 256,
          "goodput_request_s": tok_s / 256 * (0.5 if ttft > 800 else 1.0)}
    if conc is not None:
        lv["concurrency"] = conc
    if rate is not None:
        lv["rate"] = rate
    return lv


BENCH = {
    "g6": [_level(1, 128.0, 7.4, 60), _level(16, 1480.0, 10.5, 180), _level(64, 2310.0, 26.0, 1400, failed=3)],
    "sagemaker": [_level(1, 94.0, 9.9, 310), _level(16, 1040.0, 14.8, 520), _level(64, 1500.0, 40.0, 2600)],
    "inf2": [_level(1, 36.0, 27.4, 120), _level(16, 290.0, 51.0, 900)],
    "bedrock": [_level(1, 130.0, 7.2, 380), _level(16, 1900.0, 8.0, 450)],
    "g5g": [_level(None, 30.0, 28.0, 150, rate=0.1), _level(None, 55.0, 34.0, 400, rate=0.25),
            _level(None, 60.0, 60.0, 2500, rate=0.5)],
}

AGENT = [{"backend": b, "run": r, "runs": 3, "ok": ok, "quoted": q, "filters": f, "seconds": s, "error": e}
         for b, r, ok, q, f, s, e in [
             ("bedrock", 1, True, 8, ["id >= 10"], 1.19, None), ("bedrock", 2, True, 8, ["id >= 10"], 1.02, None),
             ("bedrock", 3, True, 8, ["id >= 10"], 1.11, None), ("g6", 1, True, 8, ["id >= 10"], 0.41, None),
             ("g6", 2, True, 8, ["id >= 10"], 0.40, None), ("g6", 3, False, 7, ["id > 10"], 0.38, None),
             ("sagemaker", 1, True, 8, ["id >= 10"], 0.63, None),
             ("inf2", 1, False, None, [], 30.0, "timeout after 30 s")]]


# Endpoints as harness.run saves them: (name, protocol, service, model, instance type).
ENDPOINTS = [("bedrock", "bedrock", "bedrock", "us.amazon.nova-micro-v1:0", None),
             ("sagemaker", "sagemaker", "sagemaker", "google/gemma-4-E2B-it-qat-w4a16-ct", "ml.g6.xlarge"),
             ("g6", "openai", "ec2", "google/gemma-4-E2B-it-qat-w4a16-ct", "g6.xlarge"),
             ("g5g", "openai", "ec2", "google/gemma-4-E2B-it", "g5g.2xlarge"),
             ("inf2", "openai", "ec2", "google/gemma-4-E2B-it", "inf2.xlarge")]


def _endpoint(name, protocol, service, model, instance, words):
    d = {"name": name, "model_id": model, "region": "us-east-1", "instance_type": instance}
    # "old": meta.json written before the rename, protocol under "kind" and no "service"
    return d | ({"kind": protocol} if words == "old" else {"protocol": protocol, "service": service})


def make_results(root: Path, parts=("meta", "agent", "bench", "scoreboard"), words: str = "new",
                 versioned: bool = False) -> Path:
    run = root / "20261129-120000"
    run.mkdir(parents=True)

    def save(path, contract, data):
        write_file(path, contract, data) if versioned else write_json(path, data)

    if "meta" in parts:
        save(run / "meta.json", META, {
            "run_id": run.name, "started_at": "2026-11-29T12:00:00Z", "finished_at": "2026-11-29T12:41:07Z",
            "region": "us-east-1",
            "versions": {"kit": "0.1.0", "python": "3.11.2", "boto3": "1.44.5", "strands-agents": "1.62.0",
                         "engines": {"g6": "vLLM 0.30", "sagemaker": "AWS vLLM container 0.31.0"}},
            "config": {"backends": ["bedrock", "sagemaker", "g6", "g5g", "inf2"], "profile": "180-in/256-out",
                       "slo": {"ttft_p99_ms": 800}, "idle_minutes": 30},
            "endpoints": [_endpoint(*e, words) for e in ENDPOINTS]})
    if "agent" in parts:
        for rec in AGENT:
            append_record(run / "agent_runs.jsonl", AGENT_RUNS, rec) if versioned \
                else append_jsonl(run / "agent_runs.jsonl", rec)
    if "scoreboard" in parts:
        save(run / "scoreboard.json", SCOREBOARD, {"rows": [
            {"backend": "vLLM on EC2 g6 (L4)", "answer": "Paris", "seconds": 0.151, "tok_s": 13.2},
            {"backend": "Amazon Bedrock", "answer": "Paris", "seconds": 0.861, "tok_s": 2.3}]})
    if "bench" in parts:
        for name, levels in BENCH.items():
            if versioned:
                write_file(run / "bench" / name / "summary.json", BENCH_SUMMARY, {"levels": levels})
            else:
                write_json(run / "bench" / name / "summary.json", levels)
    return run
