"""A results directory holding four SageMaker endpoints' bench results (one per GPU family) and their
four EC2 twins' (``g6`` and the variant stacks ``g6@g5``, ``g6@g6e``, ``g6@g7e`` of
``-c g6_variants=g5=@g5.xlarge,...``), built the way the bench builds them: per-request records in
the bench's record layout, summarized by ``harness.bench.metrics.summarize_level`` and written by
``harness.bench.store.write_summary``; the EC2 twins' meta.json entries are the Endpoints discovery
makes from a variant stack's outputs (``harness.discovery.endpoint_from_outputs``); cost.json
written by ``harness.cost.run_cost.cost_for_run`` from a test price snapshot."""
from __future__ import annotations

from pathlib import Path

from harness.bench.metrics import summarize_level
from harness.bench.store import write_summary
from harness.results import write_json

MODEL = "google/gemma-4-E2B-it-qat-w4a16-ct"
OUT_TOKENS = 64
# Per family: (instance type, TTFT ms at 1 stream, ITL ms at 1 stream); latency grows with load.
FAMILIES = {"g5-xlarge": ("ml.g5.xlarge", 60.0, 4.0), "g6-xlarge": ("ml.g6.xlarge", 90.0, 8.0),
            "g6e-xlarge": ("ml.g6e.xlarge", 40.0, 3.0), "g7e-2xlarge": ("ml.g7e.2xlarge", 25.0, 1.6)}
# The EC2 twins, per endpoint name: (instance type, TTFT ms at 1 stream, ITL ms at 1 stream).
EC2_TWINS = {"g6": ("g6.xlarge", 80.0, 7.5), "g6@g5": ("g5.xlarge", 55.0, 3.8),
             "g6@g6e": ("g6e.xlarge", 38.0, 2.9), "g6@g7e": ("g7e.2xlarge", 24.0, 1.5)}
# Hourly prices for the test only (labelled so in the snapshot): the kit's snapshot has no ml.g5/g6e/g7e
# price; the EC2 ones are its us-east-1 rows (g6.xlarge's is us-east-2's).
TEST_PRICES = {"ml.g5.xlarge": 1.4, "ml.g6.xlarge": 1.1267, "ml.g6e.xlarge": 2.6, "ml.g7e.2xlarge": 4.7,
               "g5.xlarge": 1.006, "g6.xlarge": 0.8048, "g6e.xlarge": 1.861, "g7e.2xlarge": 3.3631}


def _records(conc: int, ttft_ms: float, itl_ms: float, per_stream: int = 3) -> list[dict]:
    load = 1 + (conc - 1) / 32  # latency grows with concurrency
    ttft_us, itl_us = int(ttft_ms * load * 1000), int(itl_ms * load * 1000)
    out, i = [], 0
    for stream in range(conc):
        t = 1_000_000_000 + stream * 1000  # ns; each stream sends its requests back to back
        for _ in range(per_stream):
            chunk_us = [ttft_us + k * itl_us for k in range(OUT_TOKENS)]
            end = t + chunk_us[-1] * 1000 + 1000
            out.append({"id": i, "ok": True, "warmup": False, "t_scheduled_ns": t, "t_sent_ns": t, "t_end_ns": end,
                        "chunk_us": chunk_us, "chunk_tokens": [1] * OUT_TOKENS, "output_tokens": OUT_TOKENS,
                        "prompt_tokens": 2048, "output_tokens_source": "server", "chunk_tokens_source": "server"})
            t, i = end, i + 1
    return out


def _bench(run: Path, name: str, ttft: float, itl: float) -> None:
    levels = []
    for conc in (1, 16, 64):
        lv = summarize_level(_records(conc, ttft, itl), slo={"ttft_p99_ms": 800})
        lv["concurrency"] = conc
        levels.append(lv)
    write_summary(run / "bench" / name, levels)


def twin_outputs(name: str, itype: str, i: int) -> tuple[str, dict[str, str]]:
    """A deployed G6Stack's (or its variant's) outputs, the keys kit/contracts/outputs.py declares."""
    from kit.contracts.outputs import keys_for

    variant = name.partition("@")[2] or None
    values = {"BackendId": "g6", "Service": "ec2", "Region": "us-east-1", "ModelId": MODEL, "InstanceType": itype,
              "TtlExpiresAt": "2026-12-01T17:00:00Z", "IdleStopMinutes": "60", "InstanceId": f"i-0{i:016x}",
              "Port": "8000", "SshUser": "ubuntu", "Variant": variant or "", "Scheme": "w4a16",
              "ModelRevision": "unpinned"}
    keys = keys_for("ec2", variant=variant is not None)
    return ("G6Stack" + (f"-{variant}" if variant else "")), {k: values[k] for k in keys}


def make_family_results(root: Path) -> Path:
    from harness.cost.prices import PriceBook, load_snapshot
    from harness.cost.run_cost import cost_for_run
    from harness.discovery import endpoint_from_outputs

    run = root / "20261201-090000"
    endpoints = []
    for word, (itype, ttft, itl) in FAMILIES.items():
        name = f"sagemaker@{word}"
        _bench(run, name, ttft, itl)
        endpoints.append({"name": name, "protocol": "sagemaker", "service": "sagemaker", "model_id": MODEL,
                          "region": "us-east-1", "instance_type": itype,
                          "endpoint_name": f"SageMakerStack-{itype.replace('.', '-')}"})
    for i, (name, (itype, ttft, itl)) in enumerate(EC2_TWINS.items()):
        ep = endpoint_from_outputs(*twin_outputs(name, itype, i), "us-east-1")
        assert ep.name == name, ep.name
        _bench(run, name, ttft, itl)
        endpoints.append(ep.to_dict())
    write_json(run / "meta.json", {"run_id": run.name, "region": "us-east-1", "endpoints": endpoints,
                                   "config": {"backends": ["sagemaker", "g6"], "profile": "2048-in/512-out"}})
    snapshot = load_snapshot()
    snapshot = {**snapshot, "instances": [
        {"service": "sagemaker" if t.startswith("ml.") else "ec2", "instance_type": t, "region": "us-east-1",
         "usd_per_hour": p, "source": "test value"} for t, p in TEST_PRICES.items()]}
    cost_for_run(run, PriceBook.auto(offline=True, snapshot=snapshot), 5.0, write=True)
    return run
