"""Statistics of a comparison: CIs over seeds, paired differences, eval-set sizing.

- `t_interval`: mean ± t₀.₉₇₅,ₙ₋₁ · s/√n over seeds (Student t).
- `paired_bootstrap`: CI of mean(A) − mean(B) resampling seeds *and* eval items, both
  paired (a two-level bootstrap): seed k of A and B share data order, and every run of a
  task is evaluated on the same items.
- `sign_test`: per-item paired test on the eval set: each item's correctness is averaged
  over seeds (and eval samples) per condition, and the items where A and B differ are
  tested with an exact two-sided binomial (sign) test. With one seed and one sample it is
  exactly McNemar's exact test on the discordant items.
- `evalsize`: items per condition for a two-proportion z-test (normal approximation,
  Fleiss, Levin & Paik 2003 Eq. 4.14), for *independent* samples; a paired design (the same
  items for both) needs fewer, in proportion to the discordance rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def format(self, digits: int = 3) -> str:
        if self.n < 2 or not math.isfinite(self.half_width):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean ± t_{(1+c)/2, n−1} · s/√n (s: sample standard deviation, ddof = 1); with one
    value the interval is unbounded (NaN bounds)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = sps.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return Interval(mean, float(mean - half), float(mean + half), int(x.size))


def paired_bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile-bootstrap CI of mean(a) − mean(b) for per-item scores of shape
    (seeds, items), resampling seed rows and item columns with replacement, both paired."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(
            f"paired_bootstrap needs equal (seeds, items) arrays: {a.shape}, {b.shape}"
        )
    diff = a - b  # (S, N)
    rng = np.random.default_rng(seed)
    n_seeds, n_items = diff.shape
    means = np.empty(resamples)
    for r in range(resamples):
        rows = rng.integers(0, n_seeds, n_seeds)
        cols = rng.integers(0, n_items, n_items)
        means[r] = diff[np.ix_(rows, cols)].mean()
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(diff.mean()), float(low), float(high), n_seeds)


@dataclass(frozen=True)
class SignTest:
    wins: int  # items where A's seed-averaged correctness exceeds B's
    losses: int
    ties: int
    p_value: float


def sign_test(a: np.ndarray, b: np.ndarray) -> SignTest:
    """Exact two-sided sign test on items, after averaging each item over seeds (rows)."""
    a_items = np.asarray(a, dtype=float).reshape(-1, np.shape(a)[-1]).mean(axis=0)
    b_items = np.asarray(b, dtype=float).reshape(-1, np.shape(b)[-1]).mean(axis=0)
    if a_items.shape != b_items.shape:
        raise ValueError(f"sign_test needs the same eval items: {a_items.size} vs {b_items.size}")
    wins = int((a_items > b_items + 1e-12).sum())
    losses = int((b_items > a_items + 1e-12).sum())
    ties = int(a_items.size - wins - losses)
    p = 1.0 if wins + losses == 0 else sps.binomtest(wins, wins + losses, 0.5).pvalue
    return SignTest(wins, losses, ties, float(p))


def _check_probability(name: str, value: float, closed: bool = False) -> None:
    ok = 0 <= value <= 1 if closed else 0 < value < 1
    if not ok:
        raise ValueError(f"{name} must be in {'[0, 1]' if closed else '(0, 1)'}, got {value!r}")


def evalsize(baseline: float, delta: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Eval items per condition for a two-sided two-proportion z-test to detect p₂ − p₁ = δ:
    n = (z_{1−α/2}·√(2·p̄·q̄) + z_{1−β}·√(p₁q₁ + p₂q₂))² / δ², p̄ = (p₁ + p₂)/2 (Fleiss,
    Levin & Paik 2003, Eq. 4.14, without continuity correction; independent samples)."""
    _check_probability("baseline", baseline)
    _check_probability("power", power)
    _check_probability("alpha", alpha)
    p1, p2 = baseline, baseline + delta
    if delta == 0 or not 0 < p2 < 1:
        raise ValueError(f"delta must be ≠ 0 with baseline + delta in (0, 1), got {delta!r}")
    p_bar = (p1 + p2) / 2
    z_a, z_b = sps.norm.ppf(1 - alpha / 2), sps.norm.ppf(power)
    root = z_a * math.sqrt(2 * p_bar * (1 - p_bar)) + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return math.ceil(root**2 / delta**2)


def detectable_delta(baseline: float, items: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest δ > 0 that `evalsize` resolves with `items` items (bisection)."""
    if items < 1:
        raise ValueError(f"items must be ≥ 1, got {items}")
    low, high = 1e-6, 1 - baseline - 1e-9
    if evalsize(baseline, high, power, alpha) > items:
        return math.nan
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if evalsize(baseline, mid, power, alpha) > items else (low, mid)
    return high


def evalsize_text(baseline: float, delta: float, power: float = 0.8, alpha: float = 0.05) -> str:
    """A short human answer for `rlvr evalsize`."""
    n = evalsize(baseline, delta, power, alpha)
    return (
        f"{n} eval items per condition resolve {baseline:.3f} vs {baseline + delta:.3f} "
        f"(δ = {delta:+.3f}) with power {power:g} at two-sided α = {alpha:g}.\n"
        "Two-proportion z-test, normal approximation (Fleiss, Levin & Paik 2003, Eq. 4.14), "
        "for independent samples; a paired design (both conditions scored on the same items, "
        "as `rlvr compare` does) needs fewer items, and averaging seeds or samples per item "
        "reduces the noise further."
    )
