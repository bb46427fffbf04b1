"""Statistics for accuracy claims, in plain math (no scipy: the lean install stays lean).

- Per backend: Wilson score interval (Wilson 1927) for a proportion.
- Per pair, on the items both backends finished: the paired 2x2 table, the difference of the two
  accuracies with Newcombe's method-10 interval (Wilson intervals of the two marginals combined
  with a continuity-corrected phi; Newcombe 1998, Stat Med 17:2635; the same construction as
  statsmodels ``confint_proportions_paired(method="newcomb")`` and biostatUZH
  ``confIntPairedProportion``, https://rdrr.io/rforge/biostatUZH/src/R/confIntPairedProportion.R),
  the exact McNemar p-value (two-sided binomial test of the discordant items at 1/2), and the
  smallest difference detectable at ``ALPHA`` two-sided with ``POWER`` by a McNemar test of this
  many items with the observed share of discordant items (Connor 1987, Biometrics 43:207, normal
  approximation: n = (z_{1-a/2} sqrt(psi) + z_{power} sqrt(psi - d^2))^2 / d^2, solved for d).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.05  # two-sided, for every interval and for the detectable difference
POWER = 0.80  # of the detectable difference
METHODS = {
    "accuracy_ci95": "Wilson score interval",
    "diff_ci95": "Newcombe (1998) method 10: Wilson marginals, continuity-corrected phi",
    "p_mcnemar": "exact McNemar: two-sided binomial test of the discordant items at 1/2",
    "min_detectable_diff": f"Connor (1987) paired-design normal approximation, alpha {ALPHA} two-sided, "
                           f"power {POWER}, observed discordant share",
}


def norm_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def norm_ppf(q: float) -> float:
    """Inverse of the standard normal CDF by bisection on erf (exact to ~1e-15)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"norm_ppf: {q} is not in (0, 1)")
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if norm_cdf(mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def wilson(successes: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Wilson score interval for successes/n; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    z = norm_ppf(1 - alpha / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: 2 * P(X <= min) for X ~ Binomial(a_only + b_only, 1/2)."""
    m = a_only + b_only
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2 ** m)  # int / int: exact, then rounded once


def newcombe_paired(both: int, a_only: int, b_only: int, neither: int,
                    alpha: float = ALPHA) -> tuple[float, float]:
    """Interval for acc_a - acc_b from the paired table (Newcombe 1998, method 10)."""
    n = both + a_only + b_only + neither
    if n == 0:
        return -1.0, 1.0
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    l1, u1 = wilson(both + a_only, n, alpha)
    l2, u2 = wilson(both + b_only, n, alpha)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = 0.0
    if margins > 0:
        cross = both * neither - a_only * b_only
        corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = corrected / math.sqrt(margins)
    d = p1 - p2
    lower = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, lower), min(1.0, upper)


def min_detectable_diff(n: int, discordant: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Smallest |acc_a - acc_b| a two-sided McNemar test at ``alpha`` detects with ``power``
    over ``n`` items when a share ``discordant / n`` of them is discordant (Connor 1987).
    None when no item is discordant (the formula needs a discordant share above zero)."""
    if n == 0 or discordant == 0:
        return None
    psi = discordant / n
    za, zb = norm_ppf(1 - alpha / 2), norm_ppf(power)

    def needed(d: float) -> float:  # items needed to detect d; decreasing in d on (0, sqrt(psi)]
        return (za * math.sqrt(psi) + zb * math.sqrt(max(0.0, psi - d * d))) ** 2 / (d * d)

    lo, hi = 1e-12, min(psi, math.sqrt(psi))  # |d| <= psi always (d = (b - c)/n, psi = (b + c)/n)
    if needed(hi) > n:
        return hi  # even the largest possible difference is not detected reliably
    for _ in range(200):
        mid = (lo + hi) / 2
        if needed(mid) > n:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class PairTable:
    both: int
    a_only: int
    b_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    def summary(self) -> dict:
        n = self.n
        lo, hi = newcombe_paired(self.both, self.a_only, self.b_only, self.neither)
        return {"n": n, "both": self.both, "a_only": self.a_only, "b_only": self.b_only,
                "neither": self.neither, "diff": (self.a_only - self.b_only) / n if n else None,
                "ci95": [lo, hi], "p_mcnemar": mcnemar_exact(self.a_only, self.b_only),
                "min_detectable_diff": min_detectable_diff(n, self.a_only + self.b_only)}


def backend_summary(correct: int, n: int, complete: bool) -> dict:
    lo, hi = wilson(correct, n)
    return {"n": n, "correct": correct, "accuracy": correct / n if n else None,
            "ci95": [lo, hi], "complete": complete}
