"""cost_for_run on a synthetic saved run: per-endpoint prices, $/M, break-even, roofline."""
from __future__ import annotations

import json

import pytest

from harness.cost.model import cost_for_run, usd_per_m_output
from harness.cost.prices import PriceBook
from tests.report.synthetic import BENCH, make_results


def test_cost_json_from_saved_results(tmp_path):
    run = make_results(tmp_path)
    cost = cost_for_run(run, PriceBook.auto(offline=True))
    assert json.loads((run / "cost.json").read_text()) == cost
    g6 = cost["endpoints"]["g6"]
    assert g6["price"]["source"] == "snapshot" and g6["usd_per_hour"] == 0.8048
    assert g6["usd_per_m_output_single"] == pytest.approx(usd_per_m_output(0.8048, 128.0))
    assert g6["usd_per_m_output_c16"] == pytest.approx(usd_per_m_output(0.8048, 1480.0))
    assert g6["measured"]["decode_tok_s"] == pytest.approx(1000 / 7.4)
    assert g6["efficiency"] == pytest.approx(g6["measured"]["decode_tok_s"] / g6["roofline"]["ceiling_tok_s"])
    assert round(g6["break_even_tok_s"]) == 710
    bed = cost["endpoints"]["bedrock"]
    assert bed["usd_per_m_output"] == 0.14 and bed["usd_per_m_output_incl_input"] == pytest.approx(0.315)
    # g5g ran open-loop only: no single-stream figure, best throughput still priced
    g5g = cost["endpoints"]["g5g"]
    assert "usd_per_m_output_single" not in g5g and g5g["measured"]["best_at"] == {"rate": 0.5}


def test_missing_parts_are_named(tmp_path):
    run = make_results(tmp_path, parts=("meta",))
    cost = cost_for_run(run, PriceBook.auto(offline=True))
    assert set(cost["endpoints"]) == {"bedrock", "sagemaker", "g6", "g5g", "inf2"}
    assert all("bench results" in e["missing"] for e in cost["endpoints"].values())
    assert len(BENCH) == 5
