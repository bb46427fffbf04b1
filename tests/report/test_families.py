"""The report's GPU-families section from four SageMaker endpoints' bench results."""
from __future__ import annotations

import json

import pytest

from harness.report.data import load_run
from harness.report.families import family_rows, families_table
from harness.report.page import html_page, markdown
from tests.report.families_fixture import OUT_TOKENS, TEST_PRICES, make_family_results


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(make_family_results(tmp_path_factory.mktemp("families")))


def test_one_row_per_family_in_family_order(run):
    rows = family_rows(run)
    assert [r["instance_type"] for r in rows] == ["ml.g5.xlarge", "ml.g6.xlarge", "ml.g6e.xlarge", "ml.g7e.2xlarge"]
    assert [r["chip"] for r in rows][-1] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_figures_come_from_the_bench_summary(run):
    g6 = next(r for r in family_rows(run) if r["family"] == "g6")
    summary = json.loads((run.path / "bench" / "sagemaker@g6-xlarge" / "summary.json").read_text())
    c64 = next(lv for lv in summary if lv["concurrency"] == 64)
    # $/M output at 64 streams = hourly price / measured output tok/s at 64
    assert g6["usd_per_m_output_c64"] == pytest.approx(TEST_PRICES["ml.g6.xlarge"] / (c64["output_tok_s"] * 3600) * 1e6)
    # decode at 1 stream = 1000 / median TPOT (8 ms per token in the fixture); ceiling on one L4 for
    # the w4a16 E2B at 4096 tokens of context: 300e9 / 1,846,610,420 bytes per token (tests/kit/test_plan.py)
    assert g6["decode_tok_s"] == pytest.approx(125.0)
    assert g6["ceiling_tok_s"] == pytest.approx(300e9 / 1_846_610_420)
    assert g6["of_ceiling"] == pytest.approx(125.0 / (300e9 / 1_846_610_420))


def test_table_reads_like_the_seeds_comparison(run):
    head, rows = families_table(run)
    assert head[3:6] == ["TTFT p50 ms (1 / 16 / 64)", "ITL p50 ms (1 / 16 / 64)", "output tok/s (1 / 16 / 64)"]
    g7e = rows[-1]
    assert g7e[0] == "G7E (RTX PRO 6000 Blackwell Server Edition)" and g7e[2] == "ml.g7e.2xlarge (1 GPU)"
    assert g7e[4].startswith("1.6 / ") and len(g7e[5].split(" / ")) == 3
    assert g7e[6].startswith("$") and g7e[7] == f"{300e9 / 1_846_610_420 * 1597 / 300:.0f}" and g7e[8].endswith("%")
    assert OUT_TOKENS == 64


def test_section_in_both_pages(run):
    md, page = markdown(run), html_page(run)
    assert "## GPU families" in md and "sagemaker@g6e-xlarge" in md
    assert "<section id='families'><h2>GPU families</h2>" in page and "ml.g7e.2xlarge (1 GPU)" in page


def test_only_gpu_family_endpoints_with_closed_loop_levels(tmp_path):
    from tests.report.synthetic import make_results

    # the usual one-endpoint-per-backend run: g6 and sagemaker on L4 count; inf2, bedrock and g5g
    # (a Poisson-rate sweep on a T4G) do not
    other = load_run(make_results(tmp_path))
    assert [r["instance_type"] for r in family_rows(other)] == ["g6.xlarge", "ml.g6.xlarge"]
