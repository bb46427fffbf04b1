"""A run over a backend and its variants (kit/variants.py): every table of the report names
each deployment with its model id and scheme, variants right after their backend."""
from __future__ import annotations

import json

from harness.report import render
from harness.results import append_jsonl, write_json
from tests.report.synthetic import BENCH, make_results


def test_every_table_labels_variants_with_model_and_scheme(tmp_path):
    run = make_results(tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    for name, variant, model, scheme in (("g6@bf16", "bf16", "google/gemma-4-E2B-it", "bf16"),
                                         ("g6@int8", "int8", "package:int8", "int8")):
        meta["endpoints"].append({"name": name, "model_id": model, "region": "us-east-1", "instance_type": "g6.xlarge",
                                  "protocol": "openai", "service": "ec2", "variant": variant, "scheme": scheme})
        write_json(run / "bench" / name / "summary.json", BENCH["g6"])
        append_jsonl(run / "agent_runs.jsonl", {"backend": name, "run": 1, "runs": 1, "ok": True, "quoted": 8,
                                                "filters": [], "seconds": 0.5, "error": None})
    write_json(run / "meta.json", meta)
    md, _ = render(run)
    text = md.read_text()
    labels = {"g6": "g6 · google/gemma-4-E2B-it-qat-w4a16-ct (w4a16)",
              "g6@bf16": "g6@bf16 · google/gemma-4-E2B-it (bf16)", "g6@int8": "g6@int8 · package:int8"}
    for section in ("Decode speed against the roofline", "Cost per million output tokens", "Latency against throughput",
                    "Agent trial"):
        body = text.split(section, 1)[1].split("\n## ", 1)[0]
        for label in labels.values():
            assert f"| {label} |" in body, (section, label)
    # a backend without variants keeps its plain name; variants follow their backend
    assert "| inf2 |" in text
    roofline = text.split("Decode speed against the roofline", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in roofline.splitlines() if line.startswith("| g")]
    assert rows.index(labels["g6"]) + 1 == rows.index(labels["g6@bf16"])
    # the precision column: the scheme's weights, not the backend's catalog default (int4)
    assert f"| {labels['g6@bf16']} | g6.xlarge | bf16 |" in roofline
    assert f"| {labels['g6@int8']} | g6.xlarge | int8 |" in roofline
