"""The report renders from saved files only, tolerates missing parts, and shows in a browser."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report import render
from tests.conftest import require_binary
from tests.report.synthetic import ENDPOINTS, make_results

ROOT = Path(__file__).resolve().parents[2]


def _images(page: str) -> int:
    return page.count("data:image/png;base64,")


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    """One full synthetic run rendered once, shared by the content and the browser checks."""
    run = make_results(tmp_path_factory.mktemp("results"))
    return run, *render(run)


def test_full_run_renders_markdown_and_self_contained_html(full_report):
    run, md, page = full_report
    text, html = md.read_text(), page.read_text()
    assert _images(html) == 3  # roofline, cost, latency-throughput
    assert "http://" not in html and "https://" not in html and "<script" not in html  # nothing fetched
    for needle in ("Decode speed against the roofline", "Cost per million output tokens", "Latency against throughput",
                   "Agent trial", "Versions and configuration", "vLLM 0.30", "180-in/256-out"):
        assert needle in text and needle in html
    assert "6 of 8 runs passed" in text and "g6 2/3" in text
    # no cost.json in the run: computed offline from the snapshot, said so, run files untouched
    assert "costs computed offline from the price snapshot dated" in text
    assert not (run / "cost.json").exists()
    assert "SLO line: P99 TTFT <= 800 ms (from the run's configuration)" in text
    # the knee (bench's definition): sagemaker's latency grows faster than throughput from c=16 to c=64
    sm_rows = [ln for ln in text.splitlines() if ln.startswith("| sagemaker | c=")]
    assert [r.rstrip().endswith("| knee |") for r in sm_rows] == [False, True, False]


def test_existing_cost_json_is_used_as_saved(tmp_path):
    run = make_results(tmp_path)
    from harness.cost.run_cost import cost_for_run
    from harness.cost.prices import PriceBook

    cost = cost_for_run(run, PriceBook.auto(offline=True))
    cost["endpoints"]["g6"]["usd_per_m_output_c16"] = 0.123456  # the report must show what was saved
    (run / "cost.json").write_text(json.dumps(cost))
    md, _ = render(run)
    assert "$0.123" in md.read_text() and "no cost.json" not in md.read_text()


def test_results_saved_before_the_protocol_rename_render_the_same(tmp_path):
    """meta.json and cost.json written before endpoints carried ``protocol``/``service`` named the
    protocol ``kind``; such a run renders exactly as the same run saved in today's words."""
    from harness.cost.run_cost import cost_for_run
    from harness.cost.prices import PriceBook

    pages = {}
    for words in ("new", "old"):
        run = make_results(tmp_path / words, words=words)
        cost = cost_for_run(run, PriceBook.auto(offline=True))
        if words == "old":
            protocol = {e[0]: e[1] for e in ENDPOINTS}
            for name, row in cost["endpoints"].items():
                assert "service" in row and "kind" not in row
                row["kind"] = protocol[name]
                del row["service"]
        cost["generated_at"] = "2026-11-29T12:45:00+00:00"
        (run / "cost.json").write_text(json.dumps(cost))
        md, _ = render(run)
        pages[words] = md.read_text()
    assert pages["old"] == pages["new"]
    text = pages["new"]
    assert "| bedrock | us.amazon.nova-micro-v1:0 | per token | $0 idle |" in text
    assert "openai · g6.xlarge · google/gemma-4-E2B-it-qat-w4a16-ct · us-east-1" in text


def test_knee_flag_from_the_bench_wins_and_sweeps_are_separate(tmp_path):
    from harness.report.data import knee_index, sweeps

    levels = [{"concurrency": 1, "knee": False}, {"concurrency": 16, "knee": False}, {"concurrency": 64, "knee": True},
              {"rate": 0.5, "knee": False}, {"rate": 1.0, "knee": False}]
    (ckind, cs), (rkind, rs) = sweeps(levels)
    assert (ckind, rkind) == ("concurrency", "rate")
    assert knee_index(cs) == 2 and knee_index(rs) is None


def test_only_agent_runs(tmp_path):
    run = make_results(tmp_path, parts=("agent",))
    md, page = render(run)
    text = md.read_text()
    assert "Missing from this run:** meta.json (versions and configuration); scoreboard" in text
    assert "load benchmark (bench/*/summary.json)" in text
    assert "| g6 | 3/3 | FAIL | 7 |" in text
    assert _images(page.read_text()) == 0


def test_only_bench(tmp_path):
    run = make_results(tmp_path, parts=("bench",))
    md, page = render(run)
    text = md.read_text()
    assert "agent trial (agent_runs.jsonl)" in text and "meta.json" in text
    assert "SLO line: P99 TTFT <= 800 ms (default, from seed 004)" in text
    assert "| g5g | 0.1 req/s |" in text
    assert _images(page.read_text()) == 3


@pytest.mark.parametrize("make", [lambda p: p / "nope", lambda p: (p / "empty").mkdir() or p / "empty",
                                  lambda p: (p / "f.txt").write_text("x") and p / "f.txt"])
def test_bad_results_dir_is_one_line_and_non_zero(tmp_path, make):
    target = make(tmp_path)
    p = subprocess.run([sys.executable, "-m", "harness.report", str(target)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_cli_writes_both_files(tmp_path):
    run = make_results(tmp_path, parts=("meta", "bench"))
    p = subprocess.run([sys.executable, "-m", "harness.report", str(run)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert (run / "report.md").exists() and (run / "report.html").exists()


def test_html_renders_in_headless_chromium(tmp_path, full_report):
    chromium = require_binary("chromium")
    from matplotlib import image

    _, _, page = full_report
    shot = tmp_path / "shot.png"
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000",
           page.resolve().as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k not in ("http_proxy", "https_proxy")})
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    px = (image.imread(shot)[:, :, :3] * 255).astype("uint8")
    colours = {tuple(c) for c in px.reshape(-1, 3)[::7]}
    assert len(colours) > 200  # text, tables and plots, not a blank page
    # the plot colours (e.g. g6 green, Bedrock orange) reached the screen
    assert any(abs(int(r) - 0x2C) < 8 and abs(int(g) - 0xA0) < 8 and abs(int(b) - 0x2C) < 8 for r, g, b in colours)


def test_epoch_timestamps_from_harness_run_render_as_utc(tmp_path):
    run = make_results(tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    meta.pop("finished_at")
    meta.update(started_at=1795976044.6, ended_at=1795976104.0)  # what harness.run writes
    (run / "meta.json").write_text(json.dumps(meta))
    _, html_path = render(run)
    page = html_path.read_text()
    assert "2026-11-29 18:14:04 UTC → 2026-11-29 18:15:04 UTC" in page
    assert "1795976044" not in page


def test_malformed_files_render_instead_of_crashing(tmp_path):
    """Hand-edited or foreign files: wrong types where dicts, lists and numbers belong."""
    run = tmp_path / "odd"
    (run / "bench" / "g6").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"endpoints": "oops", "config": ["slo"], "versions": [1, 2],
                                               "started_at": 1e20}))
    (run / "bench" / "g6" / "summary.json").write_text(json.dumps(
        [{"concurrency": "16", "output_tok_s": 100.0}, {"concurrency": 1, "output_tok_s": "NaN"}, 5,
         {"concurrency": 4, "output_tok_s": 90.0, "e2e_ms": {"p50": 900.0}}]))
    (run / "cost.json").write_text(json.dumps({"endpoints": []}))
    md, page = render(run)
    text = md.read_text()
    assert "| g6 | c=4 |" in text and "c=16" not in text  # the usable level kept, the others dropped
    assert "costs computed offline from the price snapshot" in text  # the unusable cost.json replaced
    assert "| run | started | 1e+20 |" in text  # not an epoch time: shown as saved


def test_unwritable_results_dir_is_one_line(tmp_path, monkeypatch, capsys):
    from harness.report.__main__ import main

    run = make_results(tmp_path, parts=("meta",))

    def refuse(*a, **k):  # the report's temp file is created by harness.results.write_text
        raise PermissionError(13, "Permission denied", str(k.get("dir")))
    import harness.results
    monkeypatch.setattr(harness.results.tempfile, "mkstemp", refuse)
    assert main([str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness.report: cannot write the report into ")


def test_results_written_before_the_metric_and_service_renames_render_the_same(tmp_path):
    """A run priced by the earlier code: cost.json rows say "kind" (the protocol word), not
    "service"; its bench levels carry no knee flags. The fixture is that code's own cost.json."""
    run = make_results(tmp_path)
    (run / "cost.json").write_text((Path(__file__).parent / "fixtures" / "cost_before_service.json").read_text())
    text = render(run)[0].read_text()
    assert "- **fastest self-hosted single stream**: g6: 135.1 tok/s" in text  # 1000 / 7.4 ms, not Bedrock's
    assert "| bedrock | us.amazon.nova-micro-v1:0 | per token | $0 idle | $0.315 | $0.315 | — |" in text
    assert "| endpoint | g6 | openai · g6.xlarge · google/gemma-4-E2B-it-qat-w4a16-ct · us-east-1 |" in text
    assert "no cost.json" not in text


def test_knee_skips_a_level_cut_short(tmp_path):
    # sagemaker's knee is c=16 (latency x3.0 vs throughput x1.4 to c=64); with c=64 cut short
    # by the time limit there is no later complete level, so no knee
    run = make_results(tmp_path, parts=("bench",))
    path = run / "bench" / "sagemaker" / "summary.json"
    levels = json.loads(path.read_text())
    levels[2]["complete"] = False
    path.write_text(json.dumps(levels))
    rows = [ln for ln in render(run)[0].read_text().splitlines() if ln.startswith("| sagemaker | c=")]
    assert len(rows) == 3 and rows[2].startswith("| sagemaker | c=64 (incomplete) |")
    assert not any(r.rstrip().endswith("| knee |") for r in rows)


def test_an_endpoint_server_is_not_called_managed(tmp_path):
    """A --endpoint server (no service, no instance type) has an unknown instance, not a managed one:
    only a per-token service (Bedrock) is "managed"."""
    from harness.results import write_json
    from tests.report.synthetic import BENCH
    run = make_results(tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta["endpoints"].append({"name": "local", "model_id": "tiny", "protocol": "openai", "service": None,
                              "instance_type": None, "region": None})
    (run / "meta.json").write_text(json.dumps(meta))
    write_json(run / "bench" / "local" / "summary.json", BENCH["g6"])
    md, _ = render(run)
    rows = [ln for ln in md.read_text().splitlines() if ln.startswith("| local |")]
    assert rows and all("managed" not in ln for ln in rows), rows
    assert any(ln.startswith("| bedrock | managed |") for ln in md.read_text().splitlines())
