"""Compute-performance curves: the ScaleRL sigmoid, fitted per recipe.

ScaleRL (Khatri et al. 2025, arXiv 2510.13786, Eq. 1) models pass rate against RL compute
as R(C) = R₀ + (A − R₀) / (1 + (C_mid / C)^B): A is the asymptotic accuracy, B the
scaling exponent and C_mid the compute at which half the gain A − R₀ is reached. We
measure compute in generated tokens (the paper uses GPU-hours), fix R₀ to the measured
initial accuracy, and fit A, B and log C_mid by least squares (in log-compute space,
so C_mid is searched on the scale the data span) over every eval point with C > 0.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

MIN_R2 = 0.8  # below this, the sigmoid does not describe the curve well enough to quote A
MAX_B = 10.0


def sigmoid(compute: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) = R₀ + (A − R₀) / (1 + (C_mid / C)^B), ScaleRL Eq. 1."""
    c = np.asarray(compute, dtype=float)
    return r0 + (a - r0) / (1 + (c_mid / c) ** b)


@dataclass(frozen=True)
class SigmoidFit:
    r0: float
    a: float  # asymptote A
    b: float  # exponent B
    c_mid: float  # compute at half the gain
    r2: float
    points: int
    compute_range: tuple[float, float]
    problems: tuple[str, ...]  # why the fit is unreliable; empty if it is not

    @property
    def reliable(self) -> bool:
        return not self.problems

    def quality(self) -> str:
        return "ok" if self.reliable else "fit unreliable: " + "; ".join(self.problems)

    def predict(self, compute: np.ndarray) -> np.ndarray:
        return sigmoid(compute, self.r0, self.a, self.b, self.c_mid)


def fit_sigmoid(compute: Sequence[float], accuracy: Sequence[float], r0: float) -> SigmoidFit:
    """Fit A ∈ [R₀, 1], B ∈ (0, 10], C_mid > 0 with R₀ fixed; flags the fit unreliable when
    R² < 0.8, when C_mid lies outside the measured compute range (the data do not cover the
    midpoint, so A is an extrapolation), when A sits at its bound 1 or when there are fewer
    than 4 points."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(accuracy, dtype=float)
    keep = (c > 0) & np.isfinite(y)
    c, y = c[keep], y[keep]
    if c.size < 3:
        raise ValueError(f"a sigmoid fit needs ≥ 3 points with compute > 0, got {c.size}")
    log_c = np.log(c)
    lo, hi = float(log_c.min()), float(log_c.max())
    r0 = min(float(r0), 1.0 - 1e-6)

    def model(lc: np.ndarray, a: float, b: float, log_mid: float) -> np.ndarray:
        return r0 + (a - r0) / (1 + np.exp(b * (log_mid - lc)))

    start = (min(max(float(y.max()), r0 + 1e-3), 1.0), 1.0, (lo + hi) / 2)
    bounds = ([r0, 1e-3, lo - 5.0], [1.0, MAX_B, hi + 5.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        params, _ = curve_fit(model, log_c, y, p0=start, bounds=bounds, maxfev=20_000)
    a, b, log_mid = (float(p) for p in params)
    residual = float(((y - model(log_c, a, b, log_mid)) ** 2).sum())
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - residual / total if total > 0 else math.nan
    problems = _problems(r2, log_mid, lo, hi, c.size)
    if a >= 1 - 1e-3 and r0 < 1 - 1e-3:
        problems += ("A at its bound 1 (no plateau in the data)",)
    return SigmoidFit(r0, a, b, math.exp(log_mid), r2, int(c.size), (c.min(), c.max()), problems)


def _problems(r2: float, log_mid: float, lo: float, hi: float, points: int) -> tuple[str, ...]:
    problems = []
    if points < 4:
        problems.append(f"only {points} points")
    if not r2 >= MIN_R2:
        problems.append(f"R² = {r2:.2f} < {MIN_R2}")
    if not lo <= log_mid <= hi:
        problems.append("C_mid outside the measured compute range (midpoint not covered)")
    return tuple(problems)
