"""The ScaleRL sigmoid fit recovers the parameters of synthetic data."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.compare.curves import fit_sigmoid, sigmoid


def test_fit_recovers_parameters_from_noisy_data():
    rng = np.random.default_rng(0)
    compute = np.geomspace(1e3, 1e7, 40)
    truth = {"r0": 0.3, "a": 0.8, "b": 1.5, "c_mid": 1e5}
    accuracy = sigmoid(compute, **truth) + rng.normal(0, 0.01, compute.size)
    fit = fit_sigmoid(compute, accuracy, r0=0.3)
    assert fit.a == pytest.approx(0.8, abs=0.02)
    assert fit.c_mid == pytest.approx(1e5, rel=0.15)
    assert fit.b == pytest.approx(1.5, rel=0.2)
    assert fit.r2 > 0.98 and fit.reliable and fit.quality() == "ok"


def test_fit_flags_data_that_stop_before_the_midpoint():
    compute = np.geomspace(1e2, 1e4, 20)  # the midpoint 1e6 is far beyond the data
    accuracy = sigmoid(compute, r0=0.3, a=0.9, b=1.0, c_mid=1e6)
    fit = fit_sigmoid(compute, accuracy, r0=0.3)
    assert not fit.reliable
    assert "fit unreliable" in fit.quality()


def test_fit_flags_flat_noise():
    rng = np.random.default_rng(2)
    compute = np.geomspace(1e3, 1e5, 20)
    fit = fit_sigmoid(compute, 0.5 + rng.normal(0, 0.05, 20), r0=0.3)
    assert not fit.reliable


def test_fit_needs_three_points():
    with pytest.raises(ValueError, match="≥ 3 points"):
        fit_sigmoid([0.0, 10.0, 20.0], [0.3, 0.4, 0.5], r0=0.3)
