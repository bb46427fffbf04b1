"""harness.accuracy.stats against the independent oracle."""
import math

import pytest

from harness.accuracy import stats
from tests.accuracy import oracle


@pytest.mark.parametrize("x,n", [(0, 10), (1, 10), (7, 10), (10, 10), (29, 40), (2630, 3880), (500, 1000)])
def test_wilson_matches_score_inversion(x, n):
    assert stats.wilson(x, n) == pytest.approx(oracle.wilson_by_bisection(x, n), abs=1e-9)


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (1, 0), (3, 3), (9, 2), (2, 9), (0, 7), (25, 40), (60, 61)])
def test_mcnemar_matches_enumeration(b, c):
    assert stats.mcnemar_exact(b, c) == pytest.approx(oracle.mcnemar_p(b, c), rel=1e-12)


def test_mcnemar_known_values():
    # 6 discordant all one way: 2 * (1/2)^6 = 1/32; 9 vs 2: 2 * (1 + 11 + 55) / 2^11
    assert stats.mcnemar_exact(6, 0) == 2 / 64
    assert stats.mcnemar_exact(9, 2) == pytest.approx(2 * 67 / 2048)


@pytest.mark.parametrize("table", [(20, 9, 2, 9), (14, 5, 0, 22), (10, 15, 5, 20), (40, 0, 0, 0),
                                   (0, 3, 4, 33), (300, 40, 60, 600), (3000, 190, 210, 480)])
def test_newcombe_matches_oracle(table):
    both, a_only, b_only, neither = table
    got = stats.newcombe_paired(both, a_only, b_only, neither)
    want = oracle.newcombe([[both, a_only], [b_only, neither]])
    assert got == pytest.approx(want, abs=1e-9)
    d = (a_only - b_only) / sum(table)
    assert got[0] <= d <= got[1]


@pytest.mark.parametrize("n,disc", [(40, 11), (200, 30), (3880, 388), (1000, 5)])
def test_min_detectable_diff_has_the_stated_power(n, disc):
    d = stats.min_detectable_diff(n, disc)
    psi = disc / n
    if d < psi:  # inside the range where the formula has a solution: power 0.80 exactly there
        assert oracle.mcnemar_power(d, n, psi) == pytest.approx(0.80, abs=0.02)
    assert stats.min_detectable_diff(n, 0) is None


def test_issue_example_n3880_ten_percent_discordant():
    """The issue's numbers: paired SE ~0.5 points; -0.5 points is inside the interval, -1.3 not."""
    n = 3880
    assert math.sqrt(0.10 / n) == pytest.approx(0.0051, abs=0.0001)
    # -0.5 points: 184 a_only vs 204 b_only (388 discordant); -1.3 points: 169 vs 219
    lo, hi = stats.newcombe_paired(2400, 184, 204, 1092)
    assert lo < 0 < hi
    lo, hi = stats.newcombe_paired(2400, 169, 219, 1092)
    assert hi < 0
    assert stats.mcnemar_exact(169, 219) < 0.05 < stats.mcnemar_exact(184, 204)
    # docs/accuracy.md quotes these
    assert stats.mcnemar_exact(184, 204) == pytest.approx(0.33, abs=0.005)
    assert stats.mcnemar_exact(169, 219) == pytest.approx(0.013, abs=0.0005)
    assert stats.min_detectable_diff(n, 388) == pytest.approx(0.014, abs=0.0005)
    assert stats.min_detectable_diff(40, 11) == pytest.approx(0.23, abs=0.005)
