"""The accuracy stage of harness.run (off by default) and the report's accuracy section."""
from __future__ import annotations

import json

import boto3
import pytest

from harness.run import cli as run
from tests.accuracy import oracle
from tests.accuracy.scripted import ScriptedServer, numbered
from tests.accuracy.test_cli import A_RIGHT, B_RIGHT, N, write_items


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_off_by_default_on_with_flag():
    assert "accuracy" not in run.parse_args([]).stages
    items = ["--accuracy-items", __file__]  # checked only when the stage runs
    with pytest.raises(run.UsageError, match="accuracy-items"):
        run.parse_args(["--accuracy", *items])
    assert "accuracy" not in run.parse_args(["--only", "agent"]).stages


def test_stage_writes_results_and_report_section(tmp_path, no_aws):
    a, b = ScriptedServer(numbered(A_RIGHT), model="m-bf16"), ScriptedServer(numbered(B_RIGHT), model="m-int4")
    items = write_items(tmp_path / "items.jsonl")
    lines: list[str] = []
    try:
        rc = run.main(["--endpoint", f"bf16={a.url}", "--endpoint", f"int4={b.url}",
                       "--only", "accuracy,report", "--accuracy-items", str(items),
                       "--accuracy-concurrency", "2", "--results", str(tmp_path / "results")],
                      session=boto3.Session(region_name="us-east-1"), echo=lines.append)
    finally:
        a.stop(), b.stop()
    assert rc == 0
    [run_dir] = list((tmp_path / "results").iterdir())
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["stages"]["accuracy"] == "ok (2/2 endpoints complete)"
    acc = json.loads((run_dir / "accuracy/accuracy.json").read_text())
    assert acc["backends"]["bf16"]["correct"] == len(A_RIGHT) and acc["backends"]["int4"]["n"] == N
    assert json.loads((run_dir / "accuracy/run.json").read_text())["backends"]["int4"]["label"] == "int4 · m-int4"
    md = (run_dir / "report.md").read_text()
    assert "## Accuracy: the same items on every backend" in md
    p = acc["pairs"][0]
    lo, hi = oracle.newcombe([[20, 9], [2, 9]])
    assert f"| bf16 − int4 | 40 | +17.5 | {100 * lo:+.1f} – {100 * hi:+.1f} | 20 / 9 / 2 / 9 |" in md
    assert f"{p['p_mcnemar']:.3g}" in md and "| int4 · m-int4 | 40 | 55.0% |" in md
    html = (run_dir / "report.html").read_text()
    assert "id='accuracy'" in html and "alt='Accuracy: the same items on every backend' src='data:image/png" in html


def test_report_without_accuracy_says_none(tmp_path):
    from harness.report.accuracy import accuracy_table, difference_plot

    class R:
        path = tmp_path

    assert accuracy_table(R())[1] == [] and difference_plot(R()) is None


def test_stage_bad_input_is_one_line(capsys, tmp_path):
    assert run.main(["--only", "accuracy", "--accuracy-items", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness.run: ") and "none.jsonl" in err[0]
    assert run.main(["--only", "accuracy"]) == 2
    assert "nothing to ask" in capsys.readouterr().err


def test_deployed_backends_through_discovery_tunnel_and_sagemaker(tmp_path, monkeypatch):
    """harness.run --outputs-file: the EC2 backend through its (faked) tunnel to a scripted server,
    the SageMaker backend through boto3 invoke_endpoint on moto (replies queued in item order)."""
    import contextlib

    import requests
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({
        "G6Stack": {"BackendId": "g6", "Service": "ec2", "Region": "us-east-1", "ModelId": "google/gemma-bf16",
                    "InstanceType": "g6.xlarge", "InstanceId": "i-0123456789abcdef0", "Port": "8000"},
        "SageMakerStack": {"BackendId": "sagemaker", "Service": "sagemaker", "Region": "us-east-1",
                           "ModelId": "package:int8", "EndpointName": "kit-sagemaker-g6"}}))
    items = write_items(tmp_path / "items.jsonl")
    sm_reply = numbered(B_RIGHT)
    g6 = ScriptedServer(numbered(A_RIGHT))

    @contextlib.contextmanager
    def fake_tunnel(ep):
        yield ep.with_base_url(g6.url)

    def chat(text):
        return {"Body": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}),
                "ContentType": "application/json"}

    try:
        with mock_aws():
            requests.post("http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results", json={
                "region": "us-east-1",
                "results": [chat(sm_reply(f"Q{i}: what is {i} plus {i}?")) for i in range(N)]}).raise_for_status()
            rc = run.main(["--outputs-file", str(outputs), "--only", "accuracy", "--accuracy-items", str(items),
                           "--accuracy-concurrency", "1", "--results", str(tmp_path / "r")],
                          session=boto3.Session(region_name="us-east-1"), echo=lambda s: None,
                          open_access=fake_tunnel)
    finally:
        g6.stop()
    assert rc == 0
    [run_dir] = list((tmp_path / "r").iterdir())
    acc = json.loads((run_dir / "accuracy/accuracy.json").read_text())
    assert acc["backends"]["g6"]["correct"] == len(A_RIGHT) and acc["backends"]["sagemaker"]["correct"] == len(B_RIGHT)
    [p] = acc["pairs"]
    g6_only, sm_only = (p["a_only"], p["b_only"]) if p["a"] == "g6" else (p["b_only"], p["a_only"])
    assert (p["both"], g6_only, sm_only, p["neither"]) == (20, 9, 2, 9)
    labels = {n: b["label"] for n, b in json.loads((run_dir / "accuracy/run.json").read_text())["backends"].items()}
    assert labels == {"g6": "g6 · google/gemma-bf16", "sagemaker": "sagemaker · package:int8"}
