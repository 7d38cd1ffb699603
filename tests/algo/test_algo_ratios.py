"""Importance ratios (docs/algorithms.md §2): values and where their gradients flow."""

import math

import torch
from algo_testlib import F64, mask_of, padded

from rlvr.algo.policy.ratios import (
    prefix_min_ratio,
    sequence_ratio,
    sequence_token_ratio,
    token_ratio,
)
from rlvr.algo.policy.rollout_correction import truncated_weight

close = torch.testing.assert_close


def jacobian(fn, logprobs, old, mask):
    """∂ratio_{i,t}/∂logπ_{i,u} of one row, (T, T)."""
    return torch.autograd.functional.jacobian(lambda lp: fn(lp, old, mask)[0], logprobs)[:, 0, :]


def test_token_ratio_value_and_clamp():
    # Δ = (0.1, −0.2, 30, −30) → ρ = (e^0.1, e^−0.2, e^20, e^−20): Δ is clamped to ±20.
    old = torch.zeros(1, 4, dtype=F64)
    logprobs = torch.tensor([[0.1, -0.2, 30.0, -30.0]], dtype=F64, requires_grad=True)
    ratio = token_ratio(logprobs, old, torch.ones(1, 4, dtype=F64))
    close(
        ratio.detach(),
        torch.tensor([[math.exp(0.1), math.exp(-0.2), math.exp(20), math.exp(-20)]], dtype=F64),
    )
    ratio.sum().backward()
    # ∂ρ/∂logπ = ρ inside the clamp, 0 where clamped.
    close(logprobs.grad, torch.tensor([[math.exp(0.1), math.exp(-0.2), 0.0, 0.0]], dtype=F64))


def test_token_ratio_has_no_gradient_through_old_logprobs():
    old = torch.tensor([[-1.0, -2.0]], dtype=F64, requires_grad=True)
    logprobs = torch.tensor([[-1.5, -1.0]], dtype=F64, requires_grad=True)
    token_ratio(logprobs, old, torch.ones(1, 2, dtype=F64)).sum().backward()
    assert old.grad is None or torch.all(old.grad == 0)


def test_sequence_ratio_one_value_per_response_and_mean_gradient():
    # Row 0: Δ = (0.1, 0.3), padding garbage → s = exp(0.2) on every column.
    # Row 1: Δ = (−0.3, 0.0, 0.6) → s = exp(0.1).
    # ∂s_i/∂logπ_{i,t} = s_i/|y_i| for each valid t, 0 on padding.
    mask = mask_of([2, 3])
    old = padded([[-1.0, -1.0], [-1.0, -1.0, -1.0]], pad=4.0)
    logprobs = (old + padded([[0.1, 0.3], [-0.3, 0.0, 0.6]], pad=-9.0)).requires_grad_(True)
    ratio = sequence_ratio(logprobs, old, mask)
    s0, s1 = math.exp(0.2), math.exp(0.1)
    close(ratio.detach(), torch.tensor([[s0] * 3, [s1] * 3], dtype=F64))
    # One value per response: differentiate the first column only.
    ratio[:, 0].sum().backward()
    close(logprobs.grad, torch.tensor([[s0 / 2, s0 / 2, 0.0], [s1 / 3] * 3], dtype=F64))


def test_sequence_token_ratio_equals_sequence_value_with_per_token_gradient():
    # Value s_i on every token; ∂s_{i,t}/∂logπ_{i,u} = s_i·[t = u] (own token only).
    mask = mask_of([3])
    old = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64)
    logprobs = old + torch.tensor([[0.1, 0.2, -0.6]], dtype=F64)  # mean Δ = −0.1
    s = math.exp(-0.1)
    seq = sequence_ratio(logprobs, old, mask)
    tok = sequence_token_ratio(logprobs, old, mask)
    close(tok, seq)
    close(tok, torch.full((1, 3), s, dtype=F64))
    jac = jacobian(sequence_token_ratio, logprobs, old, mask)
    close(jac, s * torch.eye(3, dtype=F64))
    # `sequence`: every token's ratio depends on every token, s/|y| each.
    close(jacobian(sequence_ratio, logprobs, old, mask), torch.full((3, 3), s / 3, dtype=F64))


def test_prefix_min_hand_example():
    # ρ = (1.2, 0.5, 1.1):  ρ̲ = (1, min(1.2) = 1.2, min(1.2, 0.5) = 0.5)
    # ρ̲·ρ = (1.2, 1.2·0.5 = 0.6, 0.5·1.1 = 0.55).
    ratios = [1.2, 0.5, 1.1]
    old = torch.zeros(1, 3, dtype=F64)
    logprobs = torch.log(torch.tensor([ratios], dtype=F64))
    out = prefix_min_ratio(logprobs, old, mask_of([3]))
    close(out, torch.tensor([[1.2, 0.6, 0.55]], dtype=F64), rtol=1e-12, atol=1e-14)


def test_prefix_min_first_token_and_padding():
    # Row 0: ρ = (0.5, 2.0) then padding whose ratio 0.01 must never enter the min:
    #   (0.5, 0.5·2.0 = 1.0, pad...).  The first token's ρ̲ = 1 even though ρ_1 < 1.
    # Row 1: interior hole (mask 0 at t=1, ratio 0.01 there): ρ = (1.5, [0.01], 0.8)
    #   → t=2 sees min(1.5) = 1.5 → 1.2.
    # Row 2: left padding (mask 0 at t=0, ratio 0.01): first valid token t=1 has ρ̲ = 1.
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=F64)
    ratios = torch.tensor([[0.5, 2.0, 0.01], [1.5, 0.01, 0.8], [0.01, 0.7, 3.0]], dtype=F64)
    out = prefix_min_ratio(torch.log(ratios), torch.zeros(3, 3, dtype=F64), mask)
    close(out[0, :2], torch.tensor([0.5, 1.0], dtype=F64), rtol=1e-12, atol=1e-14)
    close(out[1, 2], torch.tensor(1.2, dtype=F64), rtol=1e-12, atol=1e-14)
    close(out[2, 1:], torch.tensor([0.7, 0.7 * 3.0], dtype=F64), rtol=1e-12, atol=1e-14)


def test_prefix_min_gradient_flows_through_current_token_only():
    # ρ̲_t is under stop-gradient: ∂(ρ̲_t ρ_t)/∂logπ_u = ρ̲_t ρ_t·[t = u].
    logprobs = torch.log(torch.tensor([[1.2, 0.5, 1.1]], dtype=F64))
    old = torch.zeros(1, 3, dtype=F64)
    jac = jacobian(prefix_min_ratio, logprobs, old, mask_of([3]))
    close(jac, torch.diag(torch.tensor([1.2, 0.6, 0.55], dtype=F64)), rtol=1e-12, atol=1e-14)


def test_tis_weights_hand_values():
    # Token TIS: w = min(exp(logπ_old − logπ_sampler), C = 2): Δ = (0.5, −0.5, 1.0)
    #   → (e^0.5 = 1.6487, e^−0.5 = 0.6065, min(e, 2) = 2); padding 0.
    old = torch.tensor([[0.5, -0.5, 1.0, 3.0]], dtype=F64)
    sampler = torch.zeros(1, 4, dtype=F64)
    mask = mask_of([3], 4)
    w = truncated_weight(old, sampler, mask, None, 2.0, level="token")
    close(w, torch.tensor([[math.exp(0.5), math.exp(-0.5), 2.0, 0.0]], dtype=F64))
    # Sequence TIS: mean Δ over valid tokens = (0.5 − 0.5 + 1.0)/3 = 1/3 → e^{1/3} = 1.3956 < 2.
    ws = truncated_weight(old, sampler, mask, None, 2.0, level="geometric")
    close(ws[0, :3], torch.full((3,), math.exp(1 / 3), dtype=F64))
