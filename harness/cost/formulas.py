"""The dollar formulas of the cost model, as pure functions (no I/O, no prices, no results).

    usd_per_month(usd_per_hour)                        24x7, 730 hours a month
    usd_per_m_output(usd_per_hour, tok_s)              instance $ per million output tokens
    bedrock_usd_per_m_output(in_m, out_m, ratio)       per-token service, `ratio` input tokens per output
    break_even_tok_s(usd_per_hour, in_m, out_m, ratio) average 24x7 output tok/s at which the
                                                       instance costs what the service would
    payback(monthly_before, monthly_after, engineering_usd) -> Payback(saving, months, roi(h))

Rows that apply them to prices and throughputs: ``harness.cost.rows.cost_row``.

Every function raises ValueError with one line naming the bad value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

HOURS_PER_MONTH = 730.0  # AWS's convention for a month of on-demand use
SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1_000_000.0


def positive(name: str, value: float, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or math.isinf(v) or v < 0 or (v == 0 and not allow_zero):
        need = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {need}, got {value!r}")
    return v


def usd_per_month(usd_per_hour: float, hours: float = HOURS_PER_MONTH) -> float:
    return positive("usd_per_hour", usd_per_hour, True) * positive("hours", hours)


def usd_per_m_output(usd_per_hour: float, output_tok_s: float) -> float:
    """What a million output tokens cost on an instance producing ``output_tok_s`` flat out."""
    tok_per_hour = positive("output_tok_s", output_tok_s) * SECONDS_PER_HOUR
    return positive("usd_per_hour", usd_per_hour, True) / tok_per_hour * PER_MILLION


def bedrock_usd_per_m_output(usd_per_m_input: float, usd_per_m_output_: float,
                             input_per_output: float) -> float:
    """Per-token service: cost of a million output tokens plus the input tokens that come with them."""
    return (positive("usd_per_m_input", usd_per_m_input, True)
            * positive("input_per_output", input_per_output, True)
            + positive("usd_per_m_output", usd_per_m_output_, True))


def break_even_tok_s(usd_per_hour: float, usd_per_m_input: float, usd_per_m_output_: float,
                     input_per_output: float) -> float:
    """Average output tok/s, 24x7, above which the instance is cheaper than the service."""
    per_m = bedrock_usd_per_m_output(usd_per_m_input, usd_per_m_output_, input_per_output)
    if per_m == 0:
        raise ValueError("the per-token service is free at these prices: no break-even exists")
    return positive("usd_per_hour", usd_per_hour, True) / SECONDS_PER_HOUR / (per_m / PER_MILLION)


@dataclass(frozen=True)
class Payback:
    monthly_before_usd: float
    monthly_after_usd: float
    engineering_usd: float

    @property
    def monthly_saving_usd(self) -> float:
        return self.monthly_before_usd - self.monthly_after_usd

    @property
    def months(self) -> float:
        """Months until the saving repays the engineering; inf when nothing is saved."""
        s = self.monthly_saving_usd
        return self.engineering_usd / s if s > 0 else math.inf

    def roi(self, horizon_months: float) -> float:
        """(saving over the horizon - engineering) / engineering; 1.0 means the money doubled."""
        h = positive("horizon_months", horizon_months)
        if self.engineering_usd == 0:
            raise ValueError("engineering_usd is 0: ROI is undefined (payback is immediate)")
        return (self.monthly_saving_usd * h - self.engineering_usd) / self.engineering_usd

    def to_dict(self, horizons: tuple[float, ...] = (12, 24, 36)) -> dict[str, Any]:
        d = {"monthly_before_usd": self.monthly_before_usd, "monthly_after_usd": self.monthly_after_usd,
             "monthly_saving_usd": self.monthly_saving_usd, "engineering_usd": self.engineering_usd,
             "payback_months": None if math.isinf(self.months) else self.months}
        if self.engineering_usd:
            d["roi"] = {f"{int(h)}_months": self.roi(h) for h in horizons}
        return d


def payback(monthly_before_usd: float, monthly_after_usd: float, engineering_usd: float) -> Payback:
    return Payback(positive("monthly_before_usd", monthly_before_usd, True),
                   positive("monthly_after_usd", monthly_after_usd, True),
                   positive("engineering_usd", engineering_usd, True))

