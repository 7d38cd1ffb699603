"""Predictive compute-curve fits: does a sigmoid fitted on early compute predict the rest?

ScaleRL (Khatri et al. 2025, arXiv 2510.13786, Eq. 1 and §3) fits
R(C) = R₀ + (A − R₀) / (1 + (C_mid / C)^B) on the early part of a run and extrapolates
it to judge a recipe before it finishes. `rlvr compare --predict F` tests that on the
runs at hand: for each condition it fits the sigmoid (rlvr/compare/curves.py) on the eval
points whose compute C (generated tokens, or rollout + train seconds) is at most F × the
run's final compute, predicts accuracy at the final eval point, and compares:

- per seed: that seed's own early points, R₀ its initial accuracy; the interval is a
  residual bootstrap (early-fit residuals resampled onto the fitted curve, refitted, plus
  one resampled residual as the final point's own noise);
- pooled: every seed's early points, R₀ the mean initial accuracy, predicted at the mean
  final compute against the mean final accuracy; the interval of the error
  (observed − predicted) is a bootstrap over seeds (which seeds enter both the fit and
  the observation). The prediction is "consistent" when that interval contains 0 and
  "missed" otherwise.

It also ranks the conditions by their pooled early-fit prediction and by their observed
final accuracy and says whether the two orders agree (Kendall's τ). We differ from
ScaleRL in the unit of compute (tokens or seconds, not GPU-hours) and in fixing R₀ to
the measured initial accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from rlvr.compare.curves import fit_sigmoid
from rlvr.compare.results import CellResult

COMPUTE_UNITS = ("tokens", "seconds")
MIN_POINTS = 3


def compute_of(row: dict, unit: str) -> float:
    if unit == "tokens":
        return float(row["generated_tokens"])
    return float(row["rollout_s"]) + float(row["train_s"])


@dataclass(frozen=True)
class Curve:
    """One seed's eval points: compute > 0 and accuracy, its initial accuracy."""

    seed: int
    compute: np.ndarray
    accuracy: np.ndarray
    initial: float

    def early(self, fraction: float) -> tuple[np.ndarray, np.ndarray]:
        keep = self.compute <= fraction * self.compute[-1]
        return self.compute[keep], self.accuracy[keep]


def curve_of(cell: CellResult, unit: str) -> Curve | None:
    rows = [r for r in cell.rows if r.get("eval/accuracy") is not None]
    initial = next((r["eval/accuracy"] for r in rows if r["step"] == 0), None)
    points = [(compute_of(r, unit), r["eval/accuracy"]) for r in rows if r["step"] > 0]
    points = [(c, y) for c, y in points if c > 0]
    if initial is None or not points:
        return None
    c, y = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
    return Curve(cell.cell.seed, c, y, float(initial))


@dataclass(frozen=True)
class Prediction:
    label: str
    seed: int | None  # None: pooled over seeds
    predicted: float
    observed: float
    low: float  # 95 % interval: of the prediction (per seed) or of observed − predicted (pooled)
    high: float
    early_points: int
    notes: tuple[str, ...] = ()

    @property
    def error(self) -> float:
        return self.observed - self.predicted

    @property
    def consistent(self) -> bool | None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return None
        if self.seed is None:
            return self.low <= 0 <= self.high
        return self.low <= self.observed <= self.high


def _fit_predict(compute, accuracy, r0: float, at: float) -> float:
    return float(fit_sigmoid(compute, accuracy, r0).predict(np.array([at]))[0])


def predict_seed(label: str, curve: Curve, fraction: float, resamples: int, rng) -> Prediction:
    c, y = curve.early(fraction)
    final_c, observed = float(curve.compute[-1]), float(curve.accuracy[-1])
    if c.size < MIN_POINTS:
        note = f"{c.size} early point(s) < {MIN_POINTS}: no fit"
        return Prediction(
            label, curve.seed, math.nan, observed, math.nan, math.nan, c.size, (note,)
        )
    fit = fit_sigmoid(c, y, curve.initial)
    fitted = fit.predict(c)
    residuals = y - fitted
    draws = []
    for _ in range(resamples):
        noisy = fitted + rng.choice(residuals, residuals.size)
        try:
            draws.append(_fit_predict(c, noisy, curve.initial, final_c) + rng.choice(residuals))
        except (ValueError, RuntimeError):
            continue
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (math.nan, math.nan)
    predicted = float(fit.predict(np.array([final_c]))[0])
    return Prediction(
        label, curve.seed, predicted, observed, float(low), float(high), c.size, fit.problems
    )


def _pooled(curves: Sequence[Curve], fraction: float) -> tuple[float, float, float, int]:
    """(predicted at the mean final compute, mean observed final, r0, early points)."""
    early = [cv.early(fraction) for cv in curves]
    c = np.concatenate([e[0] for e in early])
    y = np.concatenate([e[1] for e in early])
    r0 = float(np.mean([cv.initial for cv in curves]))
    at = float(np.mean([cv.compute[-1] for cv in curves]))
    observed = float(np.mean([cv.accuracy[-1] for cv in curves]))
    return _fit_predict(c, y, r0, at), observed, r0, int(c.size)


def predict_pooled(
    label: str, curves: Sequence[Curve], fraction: float, resamples: int, rng
) -> Prediction:
    try:
        predicted, observed, _, points = _pooled(curves, fraction)
    except (ValueError, RuntimeError) as err:
        observed = float(np.mean([cv.accuracy[-1] for cv in curves]))
        return Prediction(
            label, None, math.nan, observed, math.nan, math.nan, 0, (f"no fit ({err})",)
        )
    errors = []
    for _ in range(resamples if len(curves) >= 2 else 0):
        chosen = [curves[i] for i in rng.integers(0, len(curves), len(curves))]
        try:
            p, o, _, _ = _pooled(chosen, fraction)
        except (ValueError, RuntimeError):
            continue
        errors.append(o - p)
    low, high = np.percentile(errors, [2.5, 97.5]) if errors else (math.nan, math.nan)
    notes = () if errors else ("one seed: no interval",)
    return Prediction(label, None, predicted, observed, float(low), float(high), points, notes)


@dataclass(frozen=True)
class Ranking:
    predicted: list[str]
    observed: list[str]
    tau: float

    @property
    def matched(self) -> bool:
        return self.predicted == self.observed


def ranking(pooled: Sequence[Prediction]) -> Ranking | None:
    usable = [p for p in pooled if math.isfinite(p.predicted)]
    if len(usable) < 2:
        return None
    by_predicted = [p.label for p in sorted(usable, key=lambda p: -p.predicted)]
    by_observed = [p.label for p in sorted(usable, key=lambda p: -p.observed)]
    tau = sps.kendalltau([p.predicted for p in usable], [p.observed for p in usable]).statistic
    return Ranking(by_predicted, by_observed, float(tau))


def predictive_fits(
    groups: dict[str, list[CellResult]], fraction: float, unit: str = "tokens",
    resamples: int = 200, seed: int = 0,
) -> tuple[list[Prediction], list[Prediction], Ranking | None]:  # fmt: skip
    """(per-seed predictions, pooled predictions, ranking) for every condition."""
    if not 0 < fraction < 1:
        raise ValueError(f"--predict must be a fraction in (0, 1), got {fraction!r}")
    if unit not in COMPUTE_UNITS:
        raise ValueError(f"compute unit {unit!r} is unknown; valid: {', '.join(COMPUTE_UNITS)}")
    rng = np.random.default_rng(seed)
    per_seed, pooled = [], []
    for label, cells in groups.items():
        curves = [cv for cv in (curve_of(c, unit) for c in cells) if cv is not None]
        if not curves:
            continue
        per_seed += [predict_seed(label, cv, fraction, resamples // 2, rng) for cv in curves]
        pooled.append(predict_pooled(label, curves, fraction, resamples, rng))
    return per_seed, pooled, ranking(pooled)


def _fmt(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "—"


def _mark(p: Prediction) -> str:
    return {True: "consistent", False: "**missed**", None: "no interval"}[p.consistent]


def predict_section(
    groups: dict[str, list[CellResult]], fraction: float, unit: str = "tokens",
    resamples: int = 200,
) -> str:  # fmt: skip
    """The report's "Predictive fits" section in Markdown."""
    per_seed, pooled, order = predictive_fits(groups, fraction, unit, resamples)
    what = "generated tokens" if unit == "tokens" else "rollout + train seconds"
    lines = [
        f"Each condition's sigmoid is fitted on the eval points at ≤ {fraction:g} of each "
        f"run's final compute ({what}) and predicts the final eval point (rlvr/compare/"
        "predict.py). Pooled: every seed's early points; the interval is the 95 % bootstrap "
        "interval over seeds of observed − predicted, and the prediction is consistent when "
        "it contains 0. Per seed: the interval is a residual bootstrap of the prediction.",
        "",
        "| condition | early points | predicted final | observed final | observed − predicted "
        "| 95 % interval of the error | prediction | fit notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in pooled:
        lines.append(
            f"| {p.label} | {p.early_points} | {_fmt(p.predicted)} | {_fmt(p.observed)} | "
            f"{p.error:+.3f} | [{_fmt(p.low)}, {_fmt(p.high)}] | {_mark(p)} | "
            f"{'; '.join(p.notes) or 'ok'} |"
        )
    lines += ["", "| condition | seed | early points | predicted final | 95 % interval | "
              "observed final | prediction | fit notes |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in per_seed:
        lines.append(
            f"| {p.label} | {p.seed} | {p.early_points} | {_fmt(p.predicted)} | "
            f"[{_fmt(p.low)}, {_fmt(p.high)}] | {_fmt(p.observed)} | {_mark(p)} | "
            f"{'; '.join(p.notes) or 'ok'} |"
        )
    if order is not None:
        verdict = "matched" if order.matched else "**did not match**"
        lines += ["", f"Ranking by early-fit prediction: {' > '.join(order.predicted)}; by "
                  f"observed final accuracy: {' > '.join(order.observed)}: {verdict} "
                  f"(Kendall τ = {order.tau:.2f})."]  # fmt: skip
    return "\n".join(lines)
