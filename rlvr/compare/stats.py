"""The statistics of a verdict: one-sided p-values against a threshold, a two-level
bootstrap over seeds and eval items, and Holm's correction over a family of predictions.

A prediction "Δ > θ" is replicated when H₀: Δ ≤ θ is rejected at one-sided α = 0.025,
which for a Student-t interval is exactly "the 95 % CI lies above θ"; it is not
replicated when H₀: Δ ≥ θ is rejected at the same level. Holm (1979) controls the
family-wise error over m predictions: sort the p-values p₍₁₎ ≤ … ≤ p₍ₘ₎; the adjusted
p₍ᵢ₎ is maxⱼ≤ᵢ min(1, (m − j + 1)·p₍ⱼ₎), compared with the same α.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from rlvr.eval.significance import Interval, t_interval

ALPHA_ONE_SIDED = 0.025  # one side of a two-sided 95 % interval
RESAMPLES = 10_000


@dataclass(frozen=True)
class Test:
    """An interval for Δ and the one-sided p-values of Δ > θ (`p_greater`: H₀ Δ ≤ θ) and
    Δ < θ (`p_less`: H₀ Δ ≥ θ); `method` says how both were computed."""

    interval: Interval
    p_greater: float
    p_less: float
    method: str


def t_test(diffs: Sequence[float], threshold: float) -> Test:
    """Student t over paired seeds: t = (d̄ − θ)/(s/√n), n − 1 degrees of freedom."""
    d = np.asarray(diffs, dtype=float)
    interval = t_interval(d)
    se = d.std(ddof=1) / math.sqrt(d.size)
    if se == 0:  # every seed gives the same Δ: the side it lies on is certain
        mean = float(d.mean())
        greater, less = (0.0 if mean > threshold else 1.0), (0.0 if mean < threshold else 1.0)
        return Test(interval, greater, less, f"Student t over {d.size} seeds")
    t = (float(d.mean()) - threshold) / se
    greater = float(sps.t.sf(t, d.size - 1))
    return Test(
        interval, greater, float(sps.t.cdf(t, d.size - 1)), f"Student t over {d.size} seeds"
    )


def bootstrap_means(
    diff: np.ndarray, resamples: int = RESAMPLES, seed: int = 0, chunk: int = 500
) -> np.ndarray:
    """Means of `diff` (seeds, items) with seed rows and item columns resampled with
    replacement, jointly (a two-level bootstrap: which seeds, then which items)."""
    diff = np.asarray(diff, dtype=float)
    n_seeds, n_items = diff.shape
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        rows = rng.integers(0, n_seeds, (size, n_seeds))
        cols = rng.integers(0, n_items, (size, 1, n_items))
        picked = np.take_along_axis(diff[rows], np.broadcast_to(cols, (size, n_seeds, n_items)), 2)
        means[start : start + size] = picked.mean(axis=(1, 2))
    return means


def joint_bootstrap_test(
    treatment: np.ndarray, control: np.ndarray, threshold: float, resamples: int = RESAMPLES
) -> Test:
    """Δ = mean(treatment − control) over (seeds, items) arrays paired by seed and item;
    percentile 95 % interval and p-values as the share of resampled means on the wrong
    side of θ."""
    diff = np.asarray(treatment, dtype=float) - np.asarray(control, dtype=float)
    if diff.ndim != 2:
        raise ValueError(
            f"joint_bootstrap_test needs (seeds, items) arrays, got shape {diff.shape}"
        )
    means = bootstrap_means(diff, resamples)
    low, high = np.percentile(means, [2.5, 97.5])
    interval = Interval(float(diff.mean()), float(low), float(high), diff.shape[0])
    method = (
        f"bootstrap over {diff.shape[0]} seeds × {diff.shape[1]} items ({resamples:,} resamples)"
    )
    return Test(
        interval, float((means <= threshold).mean()), float((means >= threshold).mean()), method
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order (NaN stays NaN and is not counted)."""
    p = np.asarray(p_values, dtype=float)
    valid = np.flatnonzero(np.isfinite(p))
    adjusted = np.full(p.shape, math.nan)
    m = valid.size
    running = 0.0
    for rank, index in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def _number(value) -> float:
    """A metrics.jsonl value as a float: null (MetricsLogger's non-finite) is NaN."""
    return math.nan if value is None else float(value)


def cell_statistic(records: Sequence[Mapping[str, Any]], metric: str, statistic: str) -> float:
    """One number from a cell's per-step records (`metrics.jsonl`).

    final: the last logged value (any step, so an eval-only metric works);
    mean: the mean over training steps (step ≥ 1) that logged it;
    growth: the mean over the last quarter of those steps minus the mean over the first
    quarter (at least one step each). NaN when the metric was never logged; a value logged
    as null (it was not finite) counts as NaN.
    """
    if statistic == "final":
        values = [_number(r[metric]) for r in records if metric in r]
        return values[-1] if values else math.nan
    values = [_number(r[metric]) for r in records if metric in r and r.get("step", 0) >= 1]
    if not values:
        return math.nan
    if statistic == "mean":
        return sum(values) / len(values)
    quarter = max(1, len(values) // 4)
    return sum(values[-quarter:]) / quarter - sum(values[:quarter]) / quarter
