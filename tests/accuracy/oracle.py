"""Statistics computed a second way, independently of harness.accuracy.stats:
binomial tails by enumerating Pascal's triangle in exact fractions, Wilson limits by bisection on
the score test itself, z from statistics.NormalDist, the detectable difference checked through
the power function it inverts."""
from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

Z95 = NormalDist().inv_cdf(0.975)


def binomial_pmf_half(m: int) -> list[Fraction]:
    row = [Fraction(1)]
    for _ in range(m):  # Pascal's triangle, each step halving
        row = [Fraction(a + b, 2) for a, b in zip([0] + row, row + [0])]
    return row


def mcnemar_p(b: int, c: int) -> float:
    """Sum of the probabilities of every outcome no more likely than the observed one."""
    pmf = binomial_pmf_half(b + c)
    observed = pmf[b]
    return float(min(Fraction(1), sum(p for p in pmf if p <= observed)))


def wilson_by_bisection(x: int, n: int) -> tuple[float, float]:
    """The p whose score statistic |x - n p| / sqrt(n p (1 - p)) equals z, either side of x/n."""
    phat = x / n

    def outside(p: float) -> bool:
        return (x - n * p) ** 2 > Z95 ** 2 * n * p * (1 - p)

    def root(lo: float, hi: float, lo_outside: bool) -> float:
        for _ in range(200):
            mid = (lo + hi) / 2
            if outside(mid) == lo_outside:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    lower = 0.0 if x == 0 else root(0.0, phat, True)
    upper = 1.0 if x == n else root(phat, 1.0, False)
    return lower, upper


def newcombe(table: list[list[int]]) -> tuple[float, float]:
    """[[both, a_only], [b_only, neither]]: Newcombe (1998) method 10, written from the paper's
    notation (row margin = A right, column margin = B right)."""
    (r, s), (t, u) = table
    n = r + s + t + u
    p1, p2 = (r + s) / n, (r + t) / n
    l1, u1 = wilson_by_bisection(r + s, n)
    l2, u2 = wilson_by_bisection(r + t, n)
    prod = (r + s) * (t + u) * (r + t) * (s + u)
    cross = r * u - s * t
    if prod == 0:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(prod)
    elif cross < 0:
        phi = cross / math.sqrt(prod)
    else:
        phi = 0.0
    d = p1 - p2
    delta = math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    eps = math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return d - delta, d + eps


def mcnemar_power(d: float, n: int, psi: float, alpha: float = 0.05) -> float:
    """Connor (1987) approximate power of the two-sided McNemar test for difference d."""
    nd = NormalDist()
    za = nd.inv_cdf(1 - alpha / 2)
    return nd.cdf((abs(d) * math.sqrt(n) - za * math.sqrt(psi)) / math.sqrt(psi - d * d))
