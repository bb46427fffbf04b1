"""The cost model reproduces the seed articles' figures from their inputs, to the cent."""
from __future__ import annotations

import math

import pytest

from harness.cost import formulas
from harness.cost.breakeven import seed_reference

SEED = seed_reference()
BACKENDS = SEED["backends"]


def cents(x: float) -> float:
    return round(x + 1e-12, 2)


@pytest.mark.parametrize("bid", sorted(BACKENDS))
def test_single_stream_usd_per_m_output(bid):
    s = BACKENDS[bid]
    got = formulas.usd_per_m_output(s["usd_per_hour"], s["single_stream_tok_s"])
    assert cents(got) == s["published"]["usd_per_m_output_single"]


@pytest.mark.parametrize("bid", sorted(BACKENDS))
def test_usd_per_month_24x7(bid):
    s = BACKENDS[bid]
    assert round(formulas.usd_per_month(s["usd_per_hour"])) == s["published"]["usd_per_month_24x7"]


@pytest.mark.parametrize("bid", sorted(SEED["c16_tok_s"].keys() - {"_about"}))
def test_c16_usd_per_m_output(bid):
    got = formulas.usd_per_m_output(BACKENDS[bid]["usd_per_hour"], SEED["c16_tok_s"][bid])
    assert round(got, 3) == BACKENDS[bid]["published"]["usd_per_m_output_c16"]


def test_break_even_against_nova_micro():
    be, bed = SEED["break_even"], SEED["bedrock"]
    got = formulas.break_even_tok_s(BACKENDS["g6"]["usd_per_hour"], bed["usd_per_m_input"],
                                 bed["usd_per_m_output"], be["input_tokens_per_output_token"])
    assert round(got) == be["output_tok_s_24x7"]
    # At the break-even rate the month costs the same either way.
    per_m = formulas.bedrock_usd_per_m_output(bed["usd_per_m_input"], bed["usd_per_m_output"], 5)
    month_tokens = got * 3600 * formulas.HOURS_PER_MONTH
    assert month_tokens / 1e6 * per_m == pytest.approx(formulas.usd_per_month(BACKENDS["g6"]["usd_per_hour"]))


def test_bedrock_per_m_output_at_a_ratio():
    assert formulas.bedrock_usd_per_m_output(0.035, 0.14, 0) == pytest.approx(0.14)
    assert formulas.bedrock_usd_per_m_output(0.035, 0.14, 5) == pytest.approx(0.315)


def test_seed_004_payback_and_roi():
    r = SEED["roi"]
    p = formulas.payback(r["monthly_before_usd"], r["monthly_after_usd"], r["engineering_usd"])
    assert p.monthly_saving_usd == r["published"]["monthly_saving_usd"]
    assert p.months == r["published"]["payback_months"]
    assert p.roi(12.5) == pytest.approx(0.0)
    assert p.roi(25) == pytest.approx(1.0)
    d = p.to_dict()
    assert d["payback_months"] == 12.5 and d["roi"]["24_months"] == pytest.approx(0.92)


def test_no_saving_never_pays_back():
    p = formulas.payback(1000, 1200, 5000)
    assert math.isinf(p.months) and p.to_dict()["payback_months"] is None


@pytest.mark.parametrize("call", [
    lambda: formulas.usd_per_m_output(0.8, 0),
    lambda: formulas.usd_per_m_output(-1, 10),
    lambda: formulas.usd_per_month(float("nan")),
    lambda: formulas.bedrock_usd_per_m_output(0.035, 0.14, -5),
    lambda: formulas.break_even_tok_s(0.8, 0, 0, 5),
    lambda: formulas.payback(100, 50, -1),
    lambda: formulas.usd_per_m_output("fast", 10),
])
def test_bad_values_raise_one_line_value_errors(call):
    with pytest.raises(ValueError) as e:
        call()
    assert "\n" not in str(e.value)
