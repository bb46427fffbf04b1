"""Precisions are deployments (kit/variants.py): ``harness.run --only accuracy --backends g6``
over G6Stack and its variant stacks G6Stack-bf16 and G6Stack-int8 is one command; every backend is
labelled with its model id and scheme in run.json, accuracy.json's pairs, the report and cost."""
from __future__ import annotations

import contextlib
import json

import boto3
import pytest

from harness.run import cli as run
from tests.accuracy import oracle
from tests.accuracy.scripted import ScriptedServer, numbered
from tests.accuracy.test_cli import write_items

EC2 = {"BackendId": "g6", "Service": "ec2", "Region": "us-east-1", "InstanceType": "g6.xlarge", "Port": "8000",
       "SshUser": "ubuntu", "TtlExpiresAt": "disabled", "IdleStopMinutes": "60"}
STACKS = {
    "G6Stack": {**EC2, "ModelId": "google/gemma-4-E2B-it-qat-w4a16-ct", "InstanceId": "i-0000000000000000a"},
    "G6Stack-bf16": {**EC2, "ModelId": "google/gemma-4-E2B-it", "InstanceId": "i-0000000000000000b",
                     "Variant": "bf16", "Scheme": "bf16"},
    "G6Stack-int8": {**EC2, "ModelId": "package:int8", "InstanceId": "i-0000000000000000c",
                     "Variant": "int8", "Scheme": "int8"},
    "NetworkStack": {"VpcId": "vpc-1"},
}
RIGHT = {"i-0000000000000000a": set(range(0, 30)), "i-0000000000000000b": set(range(0, 32)),
         "i-0000000000000000c": set(range(3, 30))}


def test_three_precisions_one_command(tmp_path, monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_CONFIG_FILE": str(tmp_path / "no-config"), "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials")}.items():
        monkeypatch.setenv(k, v)
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps(STACKS))
    items = write_items(tmp_path / "items.jsonl")
    servers = {iid: ScriptedServer(numbered(right)) for iid, right in RIGHT.items()}

    @contextlib.contextmanager
    def fake_tunnel(ep):  # each deployment's instance is its own server
        yield ep.with_base_url(servers[ep.instance_id].url)

    printed: list[str] = []
    try:
        rc = run.main(["--outputs-file", str(outputs), "--backends", "g6", "--only", "accuracy",
                       "--accuracy-items", str(items), "--accuracy-concurrency", "1",
                       "--results", str(tmp_path / "r")],
                      session=boto3.Session(region_name="us-east-1"), echo=printed.append, open_access=fake_tunnel)
    finally:
        for s in servers.values():
            s.stop()
    assert rc == 0
    [run_dir] = list((tmp_path / "r").iterdir())
    acc = json.loads((run_dir / "accuracy/accuracy.json").read_text())
    names = {"g6": "i-0000000000000000a", "g6@bf16": "i-0000000000000000b", "g6@int8": "i-0000000000000000c"}
    assert {n: b["correct"] for n, b in acc["backends"].items()} == {n: len(RIGHT[i]) for n, i in names.items()}
    pair = next(p for p in acc["pairs"] if {p["a"], p["b"]} == {"g6@bf16", "g6@int8"})
    a, b = RIGHT[names[pair["a"]]], RIGHT[names[pair["b"]]]
    assert (pair["both"], pair["a_only"], pair["b_only"]) == (len(a & b), len(a - b), len(b - a))
    assert pair["p_mcnemar"] == pytest.approx(oracle.mcnemar_p(len(a - b), len(b - a)), rel=1e-12)
    labels = {n: b["label"] for n, b in json.loads((run_dir / "accuracy/run.json").read_text())["backends"].items()}
    assert labels == {"g6": "g6 · google/gemma-4-E2B-it-qat-w4a16-ct (w4a16)",
                      "g6@bf16": "g6@bf16 · google/gemma-4-E2B-it (bf16)",
                      "g6@int8": "g6@int8 · package:int8"}
    # the table printed at the end names each deployment the same way
    for label in labels.values():
        assert any(line.startswith(label + " ") for line in printed), (label, printed)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert {e["name"]: (e["variant"], e["scheme"]) for e in meta["endpoints"]} == {
        "g6": (None, "w4a16"), "g6@bf16": ("bf16", "bf16"), "g6@int8": ("int8", "int8")}

    # The report's accuracy table and the cost rows carry the same labels.
    from harness.cost.prices import PriceBook
    from harness.cost.run_cost import cost_for_run
    from harness.report import render

    cost = cost_for_run(run_dir, PriceBook.auto(offline=True))
    rows = cost["endpoints"]
    assert {n: (r.get("variant"), r.get("scheme"), r["precision"]) for n, r in rows.items()} == {
        "g6": (None, None, "int4"), "g6@bf16": ("bf16", "bf16", "bf16"), "g6@int8": ("int8", "int8", "int8")}
    # three g6.xlarge hours: every deployment is priced as its own instance
    assert len({r["usd_per_hour"] for r in rows.values()}) == 1 and all(r["usd_per_hour"] > 0 for r in rows.values())
    md, _ = render(run_dir)
    text = md.read_text()
    for label in labels.values():
        assert f"| {label} |" in text, label
