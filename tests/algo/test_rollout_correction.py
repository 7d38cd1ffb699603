"""Rollout correction (rlvr/algo/policy/rollout_correction.py): hand-worked weights, the older
`tis_cap` spelling giving the same numbers, the mismatch metrics of `policy_loss`, and
the recipe fields' validation."""

from __future__ import annotations

import math

import pytest
import torch
from algo_testlib import F64, mask_of

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.policy.rollout_correction import (
    ROLLOUT_CORRECTIONS,
    divergence_rejection_mask,
    mismatch_sums,
    offpolicy_sequence_mask,
)

E = math.e


def _row(values, length=4):
    """One response of len(values) tokens, padded with garbage to `length`."""
    return torch.tensor([values + [9.0] * (length - len(values))], dtype=F64)


# Δ = log π_old − log π_sampler = (0.5, −0.5, 1.0) on 3 tokens, 1 padding.
OLD, SAMPLER, MASK = _row([0.5, -0.5, 1.0]), torch.zeros(1, 4, dtype=F64), mask_of([3], 4)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        # token: ρ = (e^0.5 = 1.6487, e^−0.5 = 0.6065, e = 2.718), band [0.7, 2]
        ("token_tis", [math.exp(0.5), 0.7, 2.0]),  # clamped into the band
        ("token_mis", [math.exp(0.5), 0.0, 0.0]),  # outside: dropped
        ("token_rs", [1.0, 0.0, 0.0]),  # inside: 1
        # sequence: Π ρ = e^(0.5 − 0.5 + 1) = e > 2
        ("sequence_tis", [2.0] * 3),
        ("sequence_mis", [0.0] * 3),
        ("sequence_rs", [0.0] * 3),
        # geometric: e^(1/3) = 1.3956, inside
        ("geometric_tis", [math.exp(1 / 3)] * 3),
        ("geometric_mis", [math.exp(1 / 3)] * 3),
        ("geometric_rs", [1.0] * 3),
    ],
)
def test_weights_by_hand(choice, expected):
    w = ROLLOUT_CORRECTIONS.get(choice).fn(OLD, SAMPLER, MASK, 0.7, 2.0)
    torch.testing.assert_close(w, torch.tensor([[*expected, 0.0]], dtype=F64))


def test_divergence_rejection_by_hand():
    # k3 = ρ − 1 − log ρ per token: (e^0.5 − 1.5 = 0.1487, e^−0.5 − 0.5 = 0.1065, e − 2 = 0.7183)
    k3 = divergence_rejection_mask(OLD, SAMPLER, MASK, "token_k3", 0.2)
    torch.testing.assert_close(k3, torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=F64))
    # seq_mean_k3 = 0.9735/3 = 0.3245; seq_max_k3 = 0.7183; seq_sum_k2 = ½(0.25+0.25+1) = 0.75
    for statistic, cut, kept in (
        ("seq_mean_k3", 0.32, 0.33),
        ("seq_max_k3", 0.71, 0.72),
        ("seq_sum_k2", 0.74, 0.76),
    ):
        assert divergence_rejection_mask(OLD, SAMPLER, MASK, statistic, cut).sum() == 0
        assert divergence_rejection_mask(OLD, SAMPLER, MASK, statistic, kept).sum() == 3


def test_offpolicy_mask_by_hand():
    # mean(log π_sampler − log π_θ) over 2 tokens: row 0 (0.2 + 0.4)/2 = 0.3, row 1 0.
    sampler = torch.tensor([[0.2, 0.4], [0.0, 0.0]], dtype=F64)
    current = torch.zeros(2, 2, dtype=F64)
    mask = torch.ones(2, 2, dtype=F64)
    negative = torch.full((2, 2), -1.0, dtype=F64)
    keep = offpolicy_sequence_mask(current, sampler, negative, mask, 0.25)
    torch.testing.assert_close(keep, torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=F64))
    # Â ≥ 0 keeps any response; δ = 0.35 keeps it too
    assert offpolicy_sequence_mask(current, sampler, -negative, mask, 0.25).sum() == 4
    assert offpolicy_sequence_mask(current, sampler, negative, mask, 0.35).sum() == 4


def _loss(recipe, sampler, logprobs=None, advantages=None):
    mask = mask_of([3, 2], 4)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(2, 4, generator=g, dtype=F64)
    leaf = (old + 0.05 if logprobs is None else logprobs).clone().requires_grad_(True)
    adv = torch.tensor([[1.0], [-0.5]], dtype=F64) * mask if advantages is None else advantages
    loss, stats = policy_loss(
        recipe,
        logprobs=leaf,
        old_logprobs=old,
        advantages=adv,
        loss_weights=mask / mask.sum(),
        response_mask=mask,
        sampler_logprobs=None if sampler is None else old + sampler,
    )
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss, grad, stats.finalize()


SHIFT = torch.tensor([[0.3, -0.9, 0.2, 5.0], [-0.1, 0.8, 5.0, 5.0]], dtype=F64)


@pytest.mark.parametrize(("recipe", "level"), [("dr_grpo", "token"), ("gspo", "geometric")])
def test_tis_cap_is_the_same_correction(recipe, level):
    """tis_cap C (the older field) = token_tis (geometric_tis under GSPO's sequence
    ratio) with band (−∞, C]: the same loss and gradient."""
    old_style = _loss(get_recipe(recipe, tis_cap=1.1), -SHIFT)
    new_style = _loss(get_recipe(recipe, rollout_correction=f"{level}_tis", rc_upper=1.1), -SHIFT)
    uncorrected = _loss(get_recipe(recipe), -SHIFT)
    torch.testing.assert_close(old_style[0], new_style[0], rtol=0, atol=0)
    torch.testing.assert_close(old_style[1], new_style[1], rtol=0, atol=0)
    assert not torch.allclose(old_style[0], uncorrected[0])  # the cap acted


def test_mismatch_metrics_by_hand_whether_or_not_a_correction_is_on():
    # Δ = −SHIFT on valid tokens: row 0 (−0.3, 0.9, −0.2), row 1 (0.1, −0.8).
    # k1 = mean(SHIFT) = (0.3 − 0.9 + 0.2 − 0.1 + 0.8)/5 = 0.06
    # k3 = mean(e^Δ − 1 − Δ) = (0.04082 + 0.55960 + 0.01873 + 0.00517 + 0.24933)/5 = 0.17473
    # seq_k1 = mean over responses of Σ SHIFT = ((−0.4) + 0.7)/2 = 0.15
    # band [0.5, 2]: ρ = e^0.9 = 2.46 is outside, e^−0.8 = 0.449 too: 2/5
    k3 = sum(math.exp(d) - 1 - d for d in (-0.3, 0.9, -0.2, 0.1, -0.8)) / 5
    for recipe in (get_recipe("dr_grpo"), get_recipe("dr_grpo", rollout_correction="token_mis")):
        metrics = _loss(recipe, SHIFT)[2]
        assert metrics["rollout/mismatch_k1"] == pytest.approx(0.06)
        assert metrics["rollout/mismatch_k3"] == pytest.approx(k3)
        assert metrics["rollout/mismatch_seq_k1"] == pytest.approx(0.15)
        assert metrics["rollout/mismatch_max_abs_log_ratio"] == pytest.approx(0.9)
        assert metrics["rollout/mismatch_frac_outside_band"] == pytest.approx(2 / 5)
    # at the sequence level the band applies to Π ρ: row 0 e^−0.4 = 0.67, row 1 e^0.7 = 2.01
    seq = _loss(get_recipe("dr_grpo", rollout_correction="sequence_tis"), SHIFT)[2]
    assert seq["rollout/mismatch_frac_outside_band"] == pytest.approx(1 / 2)
    assert not any(k.startswith("rollout/mismatch") for k in _loss(get_recipe("dr_grpo"), None)[2])


def test_a_masked_token_stops_moving():
    """MIS drops tokens outside the band: their gradient is 0 and grad/token_frac counts
    them as still (2 of 5 tokens outside [0.5, 2]; without rc_lower only ρ = 2.46 is)."""
    recipe = get_recipe("dr_grpo", rollout_correction="token_mis", rc_lower=0.5)
    _, grad, metrics = _loss(recipe, SHIFT)
    moving = (grad != 0) & (mask_of([3, 2], 4) > 0)
    assert moving.tolist() == [[True, False, True, False], [True, False, False, False]]
    assert metrics["grad/token_frac"] == pytest.approx(3 / 5)
    upper_only = _loss(get_recipe("dr_grpo", rollout_correction="token_mis"), SHIFT)[2]
    assert upper_only["grad/token_frac"] == pytest.approx(4 / 5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rollout_correction": "token_clip"}, "rollout_correction='token_clip' is not valid"),
        ({"tis_cap": 2.0, "rollout_correction": "token_tis"}, "both set a correction"),
        ({"tis_cap": 2.0, "rc_upper": 3.0}, "do not apply to tis_cap"),
        ({"rollout_correction": "token_mis", "rc_upper": None}, "no band to act on"),
        ({"rc_lower": 2.0, "rc_upper": 1.5}, "rc_lower=2.0 must be below rc_upper=1.5"),
        ({"rc_upper": -1.0}, "rc_upper must be > 0 or None, got -1.0"),
        ({"rc_reject": "seq_mean_k3"}, "go together"),
        ({"rc_reject_max": 0.1}, "go together"),
        ({"rc_reject": "seq_mean_k9", "rc_reject_max": 0.1}, "rc_reject must be one of"),
        ({"offpolicy_mask_delta": -0.1}, "offpolicy_mask_delta must be ≥ 0"),
    ],
)
def test_bad_fields_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        get_recipe("grpo", **fields)


def test_k3_of_a_float32_rounding_gap_is_not_negative():
    """A float32 sampler off by ~1e-6 (the HF engine): k3 = ρ − 1 − log ρ ≈ δ²/2 ≥ 0,
    which e^δ − 1 − δ in float32 would round to negative values."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 16, generator=g)
    sampler = old + 1e-6 * torch.randn(4, 16, generator=g)
    mask = torch.ones(4, 16)
    sums, _ = mismatch_sums(old, sampler, mask)
    num, den = sums["k3"]
    delta = (old - sampler).double()
    assert float(num / den) == pytest.approx(float((delta**2 / 2).mean()), rel=1e-3)
