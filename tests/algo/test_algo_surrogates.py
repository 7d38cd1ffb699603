"""Surrogate losses (docs/algorithms.md §3) with gradients taken by autograd through logπ.

Every case sets logπ_old = 0 and logπ = log ρ, so ∂ρ/∂logπ = ρ and the expected gradient
∂ℓ/∂logπ is −ρÂ on an unclipped clip token and −w·Â for the logπ-weighted surrogates.
"""

import math

import pytest
import torch
from algo_testlib import F64
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algo.policy.ratios import token_ratio
from rlvr.algo.policy.surrogates import cispo, clip, dual_clip, reinforce
from rlvr.algo.registry import Params

close = torch.testing.assert_close


def run(surrogate, ratios, advantages, clip_low, clip_high, dual_clip_c=3.0):
    params = Params(clip_low=clip_low, clip_high=clip_high, dual_clip_c=dual_clip_c)
    logprobs = torch.log(torch.tensor([ratios], dtype=F64)).requires_grad_(True)
    old = torch.zeros_like(logprobs)
    mask = torch.ones_like(logprobs)
    adv = torch.tensor([advantages], dtype=F64)
    out = surrogate(token_ratio(logprobs, old, mask), adv, logprobs, params)
    out.loss.sum().backward()
    return out, logprobs.grad[0]


def test_clip_positive_advantage():
    # ε = 0.2, Â = +1:
    #   ρ = 1.1 (inside): ℓ = −min(1.1, 1.1) = −1.1, ∂ℓ/∂logπ = −ρÂ = −1.1
    #   ρ = 1.5 (above 1.2): ℓ = −min(1.5, 1.2) = −1.2, gradient 0, clipped high
    #   ρ = 0.5 (below 0.8): ℓ = −min(0.5, 0.8) = −0.5, gradient −0.5 (the min keeps ρÂ)
    out, grad = run(clip, [1.1, 1.5, 0.5], [1.0, 1.0, 1.0], 0.2, 0.2)
    close(out.loss.detach()[0], torch.tensor([-1.1, -1.2, -0.5], dtype=F64))
    close(grad, torch.tensor([-1.1, 0.0, -0.5], dtype=F64))
    assert out.clipped_high[0].tolist() == [False, True, False]
    assert out.clipped_low[0].tolist() == [False, False, False]


def test_clip_negative_advantage():
    # ε = 0.2, Â = −2:
    #   ρ = 0.9 (inside): ℓ = −min(−1.8, −1.8) = 1.8, gradient −ρÂ = 1.8
    #   ρ = 0.5 (below 0.8): ℓ = −min(−1.0, −1.6) = 1.6, gradient 0, clipped low
    #   ρ = 1.5 (above 1.2): ℓ = −min(−3.0, −2.4) = 3.0, gradient 3.0 (not clipped)
    out, grad = run(clip, [0.9, 0.5, 1.5], [-2.0, -2.0, -2.0], 0.2, 0.2)
    close(out.loss.detach()[0], torch.tensor([1.8, 1.6, 3.0], dtype=F64))
    close(grad, torch.tensor([1.8, 0.0, 3.0], dtype=F64))
    assert out.clipped_low[0].tolist() == [False, True, False]
    assert out.clipped_high[0].tolist() == [False, False, False]


def test_clip_higher_asymmetric_bounds():
    # DAPO ε_low = 0.2, ε_high = 0.28, Â = 1: ρ = 1.25 < 1.28 stays unclipped (grad −1.25);
    # ρ = 1.3 clips to 1.28 (ℓ = −1.28, grad 0).
    out, grad = run(clip, [1.25, 1.3], [1.0, 1.0], 0.2, 0.28)
    close(out.loss.detach()[0], torch.tensor([-1.25, -1.28], dtype=F64))
    close(grad, torch.tensor([-1.25, 0.0], dtype=F64))


@settings(max_examples=50, deadline=None)
@given(
    st.floats(-2.0, 2.0).filter(lambda x: abs(x) > 1e-6),
    st.floats(-3.0, 3.0).filter(lambda a: abs(a) > 1e-3),
)
def test_clip_gradient_is_zero_exactly_when_clipped(log_ratio, advantage):
    rho = math.exp(log_ratio)
    # Stay away from the exact bounds, where the clamp's subgradient is a convention.
    if min(abs(rho - 0.8), abs(rho - 1.2)) < 1e-9:
        return
    out, grad = run(clip, [rho], [advantage], 0.2, 0.2)
    clipped = bool(out.clipped_low[0, 0] or out.clipped_high[0, 0])
    assert (grad[0] == 0) == clipped
    if not clipped:
        close(grad[0], torch.tensor(-rho * advantage, dtype=F64))


def test_dual_clip_bounds_negative_advantages():
    # c = 3, ε = 0.2, Â = −1:
    #   ρ = 5: clip ℓ = −min(−5, −1.2) = 5 → min(5, −c·Â = 3) = 3, gradient 0, counted high
    #   ρ = 2: clip ℓ = 2 ≤ 3 → 2, gradient 2
    #   ρ = 0.5: clip ℓ = 0.8 (clipped low) → 0.8, gradient 0
    # Â = +1, ρ = 5: unchanged from clip: −1.2, gradient 0.
    out, grad = run(dual_clip, [5.0, 2.0, 0.5, 5.0], [-1.0, -1.0, -1.0, 1.0], 0.2, 0.2, 3.0)
    close(out.loss.detach()[0], torch.tensor([3.0, 2.0, 0.8, -1.2], dtype=F64))
    close(grad, torch.tensor([0.0, 2.0, 0.0, 0.0], dtype=F64))
    assert out.clipped_high[0].tolist() == [True, False, False, True]


@settings(max_examples=40, deadline=None)
@given(st.floats(-3.0, 5.0), st.floats(-4.0, -1e-3))
def test_dual_clip_loss_never_exceeds_c_times_minus_advantage(log_ratio, advantage):
    out, _ = run(dual_clip, [math.exp(log_ratio)], [advantage], 0.2, 0.2, 3.0)
    assert float(out.loss.detach()[0, 0]) <= -3.0 * advantage + 1e-12


@pytest.mark.parametrize(
    ("rho", "adv", "weight"),
    [
        # CISPO recipe bounds: ε_low = 1 (no lower bound), ε_high = 3 (w ≤ 4).
        (5.0, 1.0, 4.0),  # w = min(5, 4) = 4: clipped, still a gradient −4·1
        (0.01, -1.0, 0.01),  # tiny ratio, negative advantage: w = 0.01, gradient +0.01
        (2.0, -0.5, 2.0),  # inside: w = ρ = 2, gradient −2·(−0.5) = 1
    ],
)
def test_cispo_every_token_keeps_a_gradient(rho, adv, weight):
    # ℓ = −sg(clip(ρ, 0, 4))·Â·logπ → ∂ℓ/∂logπ = −w·Â, loss value −w·Â·log ρ.
    out, grad = run(cispo, [rho], [adv], 1.0, 3.0)
    close(grad[0], torch.tensor(-weight * adv, dtype=F64))
    close(out.loss.detach()[0, 0], torch.tensor(-weight * adv * math.log(rho), dtype=F64))
    assert grad[0] != 0
    assert bool(out.clipped_high[0, 0]) == (rho > 4.0)
    assert not out.clipped_low[0, 0]


def test_cispo_with_lower_bound():
    # ε_low = ε_high = 0.2: ρ = 0.5 → w = 0.8, Â = 1 → gradient −0.8, counted low.
    out, grad = run(cispo, [0.5], [1.0], 0.2, 0.2)
    close(grad[0], torch.tensor(-0.8, dtype=F64))
    assert out.clipped_low[0, 0]


def test_reinforce_is_importance_weighted_without_clipping():
    # ℓ = −sg(ρ)·Â·logπ: ρ = (1, 3, 0.1), Â = (2, 1, −1) → gradient (−2, −3, 0.1).
    out, grad = run(reinforce, [1.0, 3.0, 0.1], [2.0, 1.0, -1.0], 0.2, 0.2)
    close(grad, torch.tensor([-2.0, -3.0, 0.1], dtype=F64))
    # loss −ρ·Â·log ρ = (−1·2·0, −3·1·log 3, −0.1·(−1)·log 0.1).
    expected = [0.0, -3.0 * math.log(3.0), 0.1 * math.log(0.1)]
    close(out.loss.detach()[0], torch.tensor(expected, dtype=F64))
    assert not out.clipped_low.any() and not out.clipped_high.any()
