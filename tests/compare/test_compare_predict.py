"""Predictive fits on synthetic compute curves whose answer is known: a sigmoid fitted on
the first half of a true sigmoid predicts the second; a curve that collapses after the
fit window is flagged; the ranking check compares early-fit and final orders."""

import math

import numpy as np
import pytest

from rlvr.compare.curves import sigmoid
from rlvr.compare.matrix import Cell
from rlvr.compare.predict import predict_section, predictive_fits
from rlvr.compare.results import CellResult

COMPUTE = np.arange(1, 11) * 10_000.0  # eval points at 10k … 100k generated tokens


def _cell(label, seed, accuracy, r0=0.3, seconds_per_token=1e-3) -> CellResult:
    rows = [{"step": 0, "generated_tokens": 0.0, "rollout_s": 0.0, "train_s": 0.0,
             "eval/accuracy": r0}]  # fmt: skip
    for step, (c, y) in enumerate(zip(COMPUTE, accuracy, strict=True), start=1):
        half = c * seconds_per_token / 2
        rows.append({"step": step, "generated_tokens": c, "rollout_s": half, "train_s": half,
                     "eval/accuracy": float(y)})  # fmt: skip
    return CellResult(Cell(label, "grpo", seed, {}, {}), rows, [], {}, {})


def _truth(a=0.7, c_mid=30_000.0, b=2.0):
    return sigmoid(COMPUTE, 0.3, a, b, c_mid)


def _seeds(label, curve, noise=0.01, seeds=5):
    rng = np.random.default_rng(len(label))
    return [_cell(label, s, curve + rng.normal(0, noise, COMPUTE.size)) for s in range(seeds)]


def _collapsing(a=0.7):
    """The sigmoid up to 50k tokens, then a linear fall to 0.35 at 100k: a shape the
    sigmoid cannot represent, invisible in the fit window."""
    curve = _truth(a).copy()
    late = COMPUTE > 50_000
    curve[late] = np.interp(COMPUTE[late], [50_000, 100_000], [curve[4], 0.35])
    return curve


def test_a_true_sigmoid_is_predicted_within_its_interval():
    per_seed, (pooled,), _ = predictive_fits({"a": _seeds("a", _truth())}, 0.5, resamples=100)
    truth = float(_truth()[-1])  # 0.3 + 0.4/(1 + 0.09) = 0.667
    assert truth == pytest.approx(0.667, abs=1e-3)
    assert pooled.early_points == 25  # 5 seeds × eval points at 10k … 50k
    assert pooled.predicted == pytest.approx(truth, abs=0.02)
    assert pooled.consistent is True and pooled.low <= 0 <= pooled.high
    assert sum(p.consistent is True for p in per_seed) >= 4


def test_a_curve_that_collapses_after_the_fit_window_is_flagged():
    per_seed, (pooled,), _ = predictive_fits({"a": _seeds("a", _collapsing())}, 0.5, resamples=100)
    # The early fit still predicts ≈ 0.667 while the runs end at ≈ 0.35.
    assert pooled.predicted == pytest.approx(0.667, abs=0.03)
    assert pooled.observed == pytest.approx(0.35, abs=0.02)
    assert pooled.consistent is False and pooled.high < 0
    assert all(p.consistent is False for p in per_seed)
    section = predict_section({"a": _seeds("a", _collapsing())}, 0.5, resamples=50)
    assert "**missed**" in section


def test_the_ranking_check_compares_early_and_final_orders():
    honest = {"low": _seeds("low", _truth(a=0.5)), "high": _seeds("high", _truth(a=0.7))}
    *_, order = predictive_fits(honest, 0.5, resamples=20)
    assert order.predicted == order.observed == ["high", "low"] and order.matched
    assert order.tau == pytest.approx(1.0)
    # The early leader collapses after the fit window: early fits rank it first, the
    # final evaluation last.
    misled = {"low": _seeds("low", _truth(a=0.5)), "high": _seeds("high", _collapsing(a=0.7))}
    *_, order = predictive_fits(misled, 0.5, resamples=20)
    assert order.predicted == ["high", "low"] and order.observed == ["low", "high"]
    assert not order.matched and order.tau == pytest.approx(-1.0)
    assert "did not match" in predict_section(misled, 0.5, resamples=20)


def test_seconds_proportional_to_tokens_predict_the_same():
    cells = {"a": _seeds("a", _truth())}
    _, (tokens,), _ = predictive_fits(cells, 0.5, "tokens", resamples=0)
    _, (seconds,), _ = predictive_fits(cells, 0.5, "seconds", resamples=0)
    assert seconds.predicted == pytest.approx(tokens.predicted, abs=1e-4)


def test_too_few_early_points_is_said_not_fitted():
    per_seed, _, _ = predictive_fits({"a": _seeds("a", _truth(), seeds=1)}, 0.15, resamples=10)
    assert math.isnan(per_seed[0].predicted)
    assert per_seed[0].notes == ("1 early point(s) < 3: no fit",)


@pytest.mark.parametrize(("fraction", "unit", "message"), [
    (1.0, "tokens", "--predict must be a fraction in \\(0, 1\\), got 1.0"),
    (0.5, "flops", "compute unit 'flops' is unknown; valid: tokens, seconds"),
])  # fmt: skip
def test_bad_options_are_named(fraction, unit, message):
    with pytest.raises(ValueError, match=message):
        predictive_fits({}, fraction, unit)
