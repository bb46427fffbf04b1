"""cost_for_run on saved runs, against dollars worked out by hand from the snapshot's prices.

Snapshot prices used: g6.xlarge $0.8048/h; Nova Micro $0.035 / $0.14 per M input / output tokens.
The synthetic run (tests/report/synthetic.py) has g6 at 128 tok/s with 1 stream (median TPOT
7.4 ms), 1,480 tok/s with 16 and 2,310 tok/s with 64.
"""
from __future__ import annotations

import json

import pytest

from harness.cost.breakeven import offline_plan
from harness.cost.prices import PriceBook
from harness.cost.run_cost import cost_for_run
from harness.results import write_json
from tests.report.synthetic import make_results
from kit.contracts.results import COST


@pytest.fixture(scope="module")
def book():
    return PriceBook.auto(offline=True)


def test_cost_json_from_saved_results(tmp_path, book):
    run = make_results(tmp_path)
    cost = cost_for_run(run, book)
    assert json.loads((run / "cost.json").read_text()) == COST.stamp(cost)  # plus its schema_version, first
    g6 = cost["endpoints"]["g6"]
    assert g6["service"] == "ec2" and g6["price"]["source"] == "snapshot" and g6["usd_per_hour"] == 0.8048
    assert g6["usd_per_month_24x7"] == pytest.approx(587.504)  # 0.8048 x 730
    assert g6["usd_per_m_output_single"] == pytest.approx(1.74653, abs=1e-5)  # 0.8048 / (128 x 3600) x 1e6
    assert g6["usd_per_m_output_c16"] == pytest.approx(0.151051, abs=1e-6)  # 0.8048 / (1480 x 3600) x 1e6
    assert g6["usd_per_m_output_best"] == pytest.approx(0.0967773, abs=1e-7)  # at c=64, 2310 tok/s
    assert g6["measured"]["best_at"] == {"concurrency": 64}
    assert g6["measured"]["decode_tok_s"] == pytest.approx(135.135, abs=1e-3)  # 1000 / 7.4 ms
    assert g6["efficiency"] == pytest.approx(135.135 / 167.11, abs=1e-3)  # ceiling: tests/cost/test_roofline.py
    # Nova Micro at 5 input tokens per output token: 5 x 0.035 + 0.14 = $0.315 per M output;
    # g6 costs 0.8048 / 3600 $/s, i.e. the same at 0.8048 / 3600 / 0.315e-6 = 709.7 tok/s
    assert g6["break_even_tok_s"] == pytest.approx(709.70, abs=0.01)
    bed = cost["endpoints"]["bedrock"]
    assert bed["service"] == "bedrock" and bed["usd_per_month_24x7"] == 0.0
    assert bed["usd_per_m_output"] == 0.14 and bed["usd_per_m_output_incl_input"] == pytest.approx(0.315)
    # g5g ran open-loop only: no single-stream figure, the best rate still priced
    g5g = cost["endpoints"]["g5g"]
    assert "usd_per_m_output_single" not in g5g and g5g["measured"]["best_at"] == {"rate": 0.5}
    assert g5g["usd_per_m_output_best"] == pytest.approx(0.556 / (60 * 3600) * 1e6)


def test_missing_parts_are_named_not_guessed(tmp_path, book):
    run = make_results(tmp_path, parts=("meta",))
    cost = cost_for_run(run, book, write=False)
    g6 = cost["endpoints"]["g6"]
    assert g6["missing"] == ["bench results"] and g6["measured"] == {}
    assert "usd_per_m_output_single" not in g6 and g6["usd_per_hour"] == 0.8048  # the price is still known
    assert g6["efficiency"] is None
    assert not (run / "cost.json").exists()  # write=False leaves the run untouched


def test_server_outside_the_catalog_and_level_without_tpot(tmp_path, book):
    run = tmp_path / "run"
    write_json(run / "meta.json", {"region": "us-east-1", "endpoints": [
        # written after the rename: protocol + service (None: nothing AWS bills for it)
        {"name": "laptop", "protocol": "openai", "service": None, "model_id": "tiny-random"}]})
    # one-token answers: no TPOT, so no decode rate (never the level's output_tok_s instead)
    write_json(run / "bench" / "laptop" / "summary.json",
               [{"concurrency": 1, "output_tok_s": 40.0, "tpot_ms": {"p50": None}, "e2e_ms": {"p50": 25.0}}])
    row = cost_for_run(run, book, write=False)["endpoints"]["laptop"]
    assert row["service"] is None and row["measured"] == {"single_stream_tok_s": 40.0, "best_tok_s": 40.0,
                                                          "best_at": {"concurrency": 1}}
    assert row["missing"] == ["instance type (not in meta.json, not a catalog backend)"]


def test_runs_written_before_endpoints_carried_service(tmp_path, book):
    # meta.json of older runs: the protocol word in "kind", no "service": the catalog's service
    run = make_results(tmp_path, words="old")
    assert all("service" not in e for e in json.loads((run / "meta.json").read_text())["endpoints"])
    ends = cost_for_run(run, book, write=False)["endpoints"]
    assert {n: e["service"] for n, e in ends.items()} == {
        "bedrock": "bedrock", "sagemaker": "sagemaker", "g6": "ec2", "g5g": "ec2", "inf2": "ec2"}
    assert ends["bedrock"]["usd_per_m_output_incl_input"] == pytest.approx(0.315)
    assert ends["g6"]["break_even_tok_s"] == pytest.approx(709.70, abs=0.01)


def test_plan_and_run_rows_are_one_shape(tmp_path, book):
    """One function builds both: the same keys for the same backend, the same formulas."""
    run = make_results(tmp_path)
    ran = cost_for_run(run, book, write=False)["endpoints"]
    plan = offline_plan(5.0, book)
    for bid in ("g6", "sagemaker", "bedrock"):
        assert set(plan[bid]) - {"label"} == set(ran[bid]) - {"usd_per_m_output_best"}
    # the seed's g6: 131.9 tok/s single stream -> 0.8048 / (131.9 x 3600) x 1e6 = $1.695 per M
    assert plan["g6"]["usd_per_m_output_single"] == pytest.approx(1.6949, abs=1e-4)
    assert plan["g6"]["break_even_tok_s"] == ran["g6"]["break_even_tok_s"]
