"""Statistics of a comparison against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr.eval.significance import (
    detectable_delta,
    evalsize,
    paired_bootstrap,
    sign_test,
    t_interval,
)


def test_t_interval_of_one_two_three():
    # mean 2, s = 1, t₀.₉₇₅,₂ = 4.302653 → half-width 4.302653 · 1/√3 = 2.484138
    ci = t_interval([1.0, 2.0, 3.0])
    assert ci.mean == 2.0
    assert ci.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert (ci.low, ci.high) == pytest.approx((2 - 2.484138, 2 + 2.484138), rel=1e-6)
    assert ci.format() == "2.000 ± 2.484"


def test_t_interval_of_one_value_has_no_width():
    ci = t_interval([0.5])
    assert ci.mean == 0.5 and math.isnan(ci.low)
    assert ci.format() == "0.500"


def test_evalsize_hand_value():
    # p₁ = .60, p₂ = .63, p̄ = .615: z.975·√(2·.615·.385) = 1.959964·0.688150 = 1.348748
    # z.80·√(.6·.4 + .63·.37) = 0.841621·0.687823 = 0.578886; (1.927634)² / .03² = 4128.6
    assert evalsize(0.6, 0.03, power=0.8) == 4129


def test_detectable_delta_inverts_evalsize():
    delta = detectable_delta(0.6, 4129)
    assert delta == pytest.approx(0.03, abs=1e-4)
    assert evalsize(0.6, delta) <= 4129


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"baseline": 1.2, "delta": 0.1}, "baseline"), ({"baseline": 0.6, "delta": 0.5}, "delta")],
)
def test_evalsize_rejects_bad_values_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        evalsize(**kwargs)


def test_sign_test_hand_value():
    # 8 items better, 2 worse, 5 tied: p = 2·(1 + 10 + 45)/2¹⁰ = 0.109375
    a = np.array([[1] * 8 + [0] * 2 + [1] * 5])
    b = np.array([[0] * 8 + [1] * 2 + [1] * 5])
    test = sign_test(a, b)
    assert (test.wins, test.losses, test.ties) == (8, 2, 5)
    assert test.p_value == pytest.approx(0.109375)


def test_sign_test_averages_seeds_per_item():
    # item 0: A (1+0)/2 = .5 vs B 0 → win; item 1: A .5 vs B .5 → tie
    test = sign_test(np.array([[1, 1], [0, 0]]), np.array([[0, 1], [0, 0]]))
    assert (test.wins, test.losses, test.ties) == (1, 0, 1)


def test_paired_bootstrap_constant_difference_is_exact():
    rng = np.random.default_rng(0)
    b = rng.integers(0, 2, size=(3, 50)).astype(float)
    ci = paired_bootstrap(b + 0.25, b, resamples=200)
    assert (ci.mean, ci.low, ci.high) == pytest.approx((0.25, 0.25, 0.25))


def test_paired_bootstrap_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, size=(3, 200)).astype(float)
    b = rng.integers(0, 2, size=(3, 200)).astype(float)
    first = paired_bootstrap(a, b, resamples=500, seed=7)
    assert first == paired_bootstrap(a, b, resamples=500, seed=7)
    assert first.low < first.mean < first.high
