"""KL estimators, value loss, soft overlong penalty, selection and step stats, by hand."""

import math

import pytest
import torch
from algo_testlib import F64
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algo import StepStats
from rlvr.algo.regularizers import kl_k1, kl_k2, kl_k3, soft_overlong_penalty, value_loss
from rlvr.algo.selection import informative_groups, nonzero_variance_groups, shaped_rewards

close = torch.testing.assert_close


def t(values):
    return torch.tensor(values, dtype=F64)


def test_kl_estimators_hand_values():
    # Δ_ref = logπ − logπ_ref = (0.5, −1, 0):
    #   k1 = Δ = (0.5, −1, 0)
    #   k2 = ½Δ² = (0.125, 0.5, 0)
    #   k3 = e^{−Δ} + Δ − 1 = (e^{−0.5} − 0.5, e − 2, 0) = (0.1065307, 0.7182818, 0)
    logprobs = t([-0.5, -2.0, -1.0])
    ref = t([-1.0, -1.0, -1.0])
    close(kl_k1(logprobs, ref), t([0.5, -1.0, 0.0]))
    close(kl_k2(logprobs, ref), t([0.125, 0.5, 0.0]))
    close(
        kl_k3(logprobs, ref), t([math.exp(-0.5) - 0.5, math.e - 2.0, 0.0]), rtol=1e-12, atol=1e-15
    )


@settings(max_examples=50, deadline=None)
@given(st.floats(-30.0, 30.0), st.floats(-30.0, 30.0))
def test_k3_is_nonnegative(logprob, ref):
    # exp(−Δ) + Δ − 1 in float64 can round to −1e-16 for |Δ| ~ 1e-13
    assert float(kl_k3(t([logprob]), t([ref]))[0]) >= -1e-12


def test_value_loss_clipping_hand_values():
    # c = 0.2, ½·max((V − R)², (clip(V, V_old ± 0.2) − R)²):
    #   V=1.0, V_old=0.5, R=0: unclipped 1.0², clipped V→0.7: 0.49 → ½·1.0 = 0.5
    #   V=0.6, V_old=0.5, R=1: inside the range: ½·0.16 = 0.08
    #   V=1.0, V_old=0.5, R=2: unclipped 1.0, clipped (0.7 − 2)² = 1.69 → ½·1.69 = 0.845
    values = t([1.0, 0.6, 1.0]).requires_grad_(True)
    loss = value_loss(values, t([0.5, 0.5, 0.5]), t([0.0, 1.0, 2.0]), clip_range=0.2)
    close(loss.detach(), t([0.5, 0.08, 0.845]), rtol=1e-12, atol=1e-15)
    loss.sum().backward()
    # Gradients: V − R = 1.0; V − R = −0.4; the clipped branch wins and is saturated → 0.
    close(values.grad, t([1.0, -0.4, 0.0]), rtol=1e-12, atol=1e-15)
    # No clipping: ½(V − R)² = (0.5, 0.08, 0.5).
    close(
        value_loss(t([1.0, 0.6, 1.0]), t([0.5, 0.5, 0.5]), t([0.0, 1.0, 2.0]), None),
        t([0.5, 0.08, 0.5]),
    )


def test_soft_overlong_penalty_boundaries():
    # L_max = 8, L_c = 2 → ramp starts after 6: 6 → 0, 7 → (6 − 7)/2 = −0.5, 8 → −1, 9 → −1.
    penalty = soft_overlong_penalty(torch.tensor([1, 6, 7, 8, 9]), max_length=8, cache=2)
    close(penalty, t([0.0, 0.0, -0.5, -1.0, -1.0]))


@pytest.mark.parametrize("cache", [0, 9])
def test_soft_overlong_penalty_rejects_bad_cache(cache):
    with pytest.raises(ValueError, match="overlong_cache"):
        soft_overlong_penalty(torch.tensor([3]), max_length=8, cache=cache)


def test_shaped_rewards_add_penalty_only_with_a_cache():
    rewards, lengths = t([1.0, 1.0]), torch.tensor([5, 7])
    close(shaped_rewards(rewards, lengths, 8, 2), t([1.0, 0.5]))
    close(shaped_rewards(rewards, lengths, 8, None), rewards)


def test_informative_groups_use_correctness():
    # g0 all correct → drop; g1 mixed → keep; g2 all wrong → drop; g3 single → drop.
    correct = t([1, 1, 0, 1, 0, 0, 1])
    keep = informative_groups(correct, torch.tensor([0, 0, 1, 1, 2, 2, 3]))
    assert keep.tolist() == [False, False, True, True, False, False, False]


def test_nonzero_variance_groups():
    keep = nonzero_variance_groups(t([0.5, 0.5, 0.2, 0.3]), torch.tensor([0, 0, 1, 1]))
    assert keep.tolist() == [False, False, True, True]


def test_step_stats_merge_exactly():
    # Micro-batch A: 1 of 4 tokens clipped; B: 3 of 4 → 4/8 = 0.5 (not the mean of 0.25, 0.75
    # weighted by batch count, which here happens to coincide; use 1/2 and 3/6 to differ).
    a, b = StepStats(), StepStats()
    a.add("loss/policy", 0.25)
    a.add_ratio("clip/frac", 1, 2)
    b.add("loss/policy", 0.5)
    b.add_ratio("clip/frac", 3, 6)
    b.add_ratio("clip/empty", 0, 0)
    out = a.merge(b).finalize()
    # Σ losses = 0.75; (1 + 3)/(2 + 6) = 0.5; an empty ratio reads 0.
    assert out == {"loss/policy": 0.75, "clip/frac": 0.5, "clip/empty": 0.0}
