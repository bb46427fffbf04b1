"""The report's GPU-families section from four SageMaker endpoints' bench results and their four
EC2 twins' (g6 and its variants g6@g5, g6@g6e, g6@g7e)."""
from __future__ import annotations

import pytest

from harness.report.data import load_run
from harness.report.families import family_rows, families_table
from harness.report.page import html_page, markdown
from tests.conftest import saved_levels
from tests.report.families_fixture import EC2_TWINS, OUT_TOKENS, TEST_PRICES, make_family_results

# bytes one decode step of the w4a16 E2B reads at 4096 tokens of context (tests/kit/test_plan.py)
E2B_W4A16_READ = 1_846_610_420


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(make_family_results(tmp_path_factory.mktemp("families")))


def test_one_row_per_endpoint_in_family_order_sagemaker_then_its_ec2_twin(run):
    rows = family_rows(run)
    assert [(r["name"], r["instance_type"]) for r in rows] == [
        ("sagemaker@g5-xlarge", "ml.g5.xlarge"), ("g6@g5", "g5.xlarge"),
        ("sagemaker@g6-xlarge", "ml.g6.xlarge"), ("g6", "g6.xlarge"),
        ("sagemaker@g6e-xlarge", "ml.g6e.xlarge"), ("g6@g6e", "g6e.xlarge"),
        ("sagemaker@g7e-2xlarge", "ml.g7e.2xlarge"), ("g6@g7e", "g7e.2xlarge")]
    assert [r["chip"] for r in rows][-2:] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 2


def test_figures_come_from_the_bench_summary(run):
    g6 = next(r for r in family_rows(run) if r["family"] == "g6")
    summary = saved_levels(run.path / "bench" / "sagemaker@g6-xlarge" / "summary.json")
    c64 = next(lv for lv in summary if lv["concurrency"] == 64)
    # $/M output at 64 streams = hourly price / measured output tok/s at 64
    assert g6["usd_per_m_output_c64"] == pytest.approx(TEST_PRICES["ml.g6.xlarge"] / (c64["output_tok_s"] * 3600) * 1e6)
    # decode at 1 stream = 1000 / median TPOT (8 ms per token in the fixture); ceiling on one L4 for
    # the w4a16 E2B at 4096 tokens of context: 300e9 / 1,846,610,420 bytes per token (tests/kit/test_plan.py)
    assert g6["decode_tok_s"] == pytest.approx(125.0)
    assert g6["ceiling_tok_s"] == pytest.approx(300e9 / E2B_W4A16_READ)
    assert g6["of_ceiling"] == pytest.approx(125.0 / (300e9 / E2B_W4A16_READ))


def test_ec2_twin_figures_come_from_its_own_bench_summary_and_price(run):
    g5 = next(r for r in family_rows(run) if r["name"] == "g6@g5")
    summary = saved_levels(run.path / "bench" / "g6@g5" / "summary.json")
    levels = {lv["concurrency"]: lv for lv in summary}
    assert [lv["concurrency"] for lv in g5["levels"]] == [1, 16, 64]
    # $/M at 64 on g5.xlarge's own price, not the g6 backend's
    assert g5["usd_per_hour"] == TEST_PRICES["g5.xlarge"]
    assert g5["usd_per_m_output_c64"] == pytest.approx(TEST_PRICES["g5.xlarge"] / (levels[64]["output_tok_s"] * 3600) * 1e6)
    # one A10G: 600 GB/s over the same bytes per token; decode at 1 stream 1000 / 3.8 ms
    assert g5["ceiling_tok_s"] == pytest.approx(600e9 / E2B_W4A16_READ)
    assert g5["decode_tok_s"] == pytest.approx(1000 / EC2_TWINS["g6@g5"][2])
    assert g5["of_ceiling"] == pytest.approx((1000 / 3.8) / (600e9 / E2B_W4A16_READ))
    assert (g5["family"], g5["chip"], g5["gpus"]) == ("g5", "NVIDIA A10G", 1)


def test_table_reads_like_the_seeds_comparison(run):
    head, rows = families_table(run)
    assert head[3:6] == ["TTFT p50 ms (1 / 16 / 64)", "ITL p50 ms (1 / 16 / 64)", "output tok/s (1 / 16 / 64)"]
    g7e, twin = rows[-2], rows[-1]
    assert g7e[0] == "G7E (RTX PRO 6000 Blackwell Server Edition)" and g7e[2] == "ml.g7e.2xlarge (1 GPU)"
    assert g7e[4].startswith("1.6 / ") and len(g7e[5].split(" / ")) == 3
    assert g7e[6].startswith("$") and g7e[7] == f"{300e9 / E2B_W4A16_READ * 1597 / 300:.0f}" and g7e[8].endswith("%")
    # the EC2 twin on the same hardware: same ceiling, its own measurements and price
    assert twin[0] == g7e[0] and twin[2] == "g7e.2xlarge (1 GPU)" and twin[7] == g7e[7]
    assert twin[4].startswith("1.5 / ") and twin[6] != g7e[6] and twin[1].startswith("g6@g7e")
    assert OUT_TOKENS == 64


def test_section_in_both_pages(run):
    md, page = markdown(run), html_page(run)
    assert "## GPU families" in md and "sagemaker@g6e-xlarge" in md and "g6@g6e" in md
    assert "<section id='families'><h2>GPU families</h2>" in page and "ml.g7e.2xlarge (1 GPU)" in page


def test_only_gpu_family_endpoints_with_closed_loop_levels(tmp_path):
    from tests.report.synthetic import make_results

    # the usual one-endpoint-per-backend run: g6 and sagemaker on L4 count; inf2, bedrock and g5g
    # (a Poisson-rate sweep on a T4G) do not
    other = load_run(make_results(tmp_path))
    assert [r["instance_type"] for r in family_rows(other)] == ["ml.g6.xlarge", "g6.xlarge"]
