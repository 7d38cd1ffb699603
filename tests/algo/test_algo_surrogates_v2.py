"""The second-generation choices (issue 29) by hand: SAPO, GMPO, DPPO values and gradients
worked out in comments; Clip-Cov / KL-Cov's dependence on the micro-batch; the recipe
checks that refuse a setting which cannot take effect. Peer equality: test_algo_peers.py."""

from __future__ import annotations

import math
import re

import pytest
import torch
from algo_testlib import F64, random_batch

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.ratios import token_ratio
from rlvr.algo.policy.surrogates import dppo_tv, gmpo, sapo
from rlvr.algo.registry import Params

close = torch.testing.assert_close


def leaf(values):
    return torch.tensor([values], dtype=F64).requires_grad_(True)


def test_sapo_by_hand():
    # logπ_old = 0. Token 1: ρ = 1, Â = +1, τ = 1: f = 4·σ(0) = 2, ℓ = −2, ∂ℓ/∂logπ =
    #   −4·σ(1 − σ)·ρ·Â = −4·¼·1 = −1 (the plain policy gradient on-policy).
    # Token 2: ρ = e^0.5 = 1.64872, Â = −1, τ_neg = 1.05: τ(ρ − 1) = 0.68116, σ = 0.66400,
    #   f = (4/1.05)·0.66400 = 2.52951, ℓ = +2.52951,
    #   ∂ℓ/∂logπ = −4·0.66400·0.33600·1.64872·(−1) = +1.47135 (soft, never exactly 0).
    logprobs = leaf([0.0, 0.5])
    mask = torch.ones_like(logprobs)
    ratio = token_ratio(logprobs, torch.zeros_like(logprobs), mask)
    out = sapo(ratio, torch.tensor([[1.0, -1.0]], dtype=F64), logprobs, Params())
    out.loss.sum().backward()
    close(out.loss.detach()[0], torch.tensor([-2.0, 2.5295122036], dtype=F64))
    close(logprobs.grad[0], torch.tensor([-1.0, 1.4713518315], dtype=F64))
    assert not (out.clipped_low | out.clipped_high).any()


def test_gmpo_by_hand():
    # One response, Â = +1 on both tokens, Δ = (0.1, 0.6), ε = 0.4 in log space:
    # Δ̃ = (0.1, min(0.6, 0.4) = 0.4), mean 0.25, s = e^0.25 = 1.28403, ℓ = −1.28403 on
    # both tokens. ∂ℓ/∂logπ_1 = −s/2 = −0.64201; token 2 is clipped: 0.
    # The response is counted once: Σ_t (1/|y|)·ℓ = ℓ (seq_mean_token_mean over 1 response).
    logprobs = leaf([0.1, 0.6])
    mask = torch.ones_like(logprobs)
    ratio = token_ratio(logprobs, torch.zeros_like(logprobs), mask)
    adv = torch.ones_like(logprobs)
    out = gmpo(ratio, adv, logprobs, Params(clip_low=0.4, clip_high=0.4), response_mask=mask)
    (out.loss * mask / 2).sum().backward()
    close(out.loss.detach()[0], torch.full((2,), -math.exp(0.25), dtype=F64))
    close(logprobs.grad[0], torch.tensor([-math.exp(0.25) / 2, 0.0], dtype=F64))
    assert out.clipped_high[0].tolist() == [False, True]
    # Â < 0 clips the other side: Δ = −0.6 → max(−0.6, −0.4) = −0.4 has no gradient.
    neg = leaf([-0.6, 0.0])
    ratio = token_ratio(neg, torch.zeros_like(neg), mask)
    out = gmpo(ratio, -adv, neg, Params(clip_low=0.4, clip_high=0.4), response_mask=mask)
    (out.loss * mask / 2).sum().backward()
    assert neg.grad[0, 0] == 0 and neg.grad[0, 1] > 0
    assert out.clipped_low[0].tolist() == [True, False]


def test_dppo_tv_by_hand():
    # π_old = 0.5 on every token; δ = 0.15, C = 20; ℓ = −M·min(ρ, C)·Â·logπ, ∂ℓ/∂logπ = −M·ρ·Â.
    #   π = 0.7, Â = +1: π − π_old = 0.2 > 0.15, moved too far up: masked, gradient 0.
    #   π = 0.6, Â = +1: 0.1 inside: ρ = 1.2, gradient −1.2.
    #   π = 0.3, Â = −1: π_old − π = 0.2 > 0.15, too far down: masked.
    #   π = 0.7, Â = −1: the mask only limits moves in the advantage's direction: ρ = 1.4,
    #   gradient +1.4.
    probs = [0.7, 0.6, 0.3, 0.7]
    logprobs = leaf([math.log(p) for p in probs])
    old = torch.full_like(logprobs, math.log(0.5))
    mask = torch.ones_like(logprobs)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=F64)
    ratio = token_ratio(logprobs, old, mask)
    out = dppo_tv(ratio, adv, logprobs, Params(0.15, 0.15), anchor_logprobs=old)
    out.loss.sum().backward()
    close(logprobs.grad[0], torch.tensor([0.0, -1.2, 0.0, 1.4], dtype=F64))
    assert out.clipped_high[0].tolist() == [True, False, False, False]
    assert out.clipped_low[0].tolist() == [False, False, True, False]
    # Called as a plain surrogate (rlvr.service: no anchor), μ is rebuilt from the ratio:
    # the same within the ratio's ±20 clamp; exp/log round trips agree to float64 rounding.
    plain = dppo_tv(ratio.detach(), adv, logprobs.detach(), Params(0.15, 0.15))
    torch.testing.assert_close(plain.loss, out.loss.detach(), rtol=1e-12, atol=0)
    # The cap: ρ = 30 > C = 20 weighs 20 (δ = 1 turns the mask off).
    big = leaf([math.log(0.03)])
    anchor = big.detach() - math.log(30)
    w = dppo_tv(
        token_ratio(big, anchor, torch.ones_like(big)),
        torch.ones_like(big),
        big,
        Params(1.0, 1.0),
        anchor_logprobs=anchor,
    )
    w.loss.sum().backward()
    close(big.grad, torch.tensor([[-20.0]], dtype=F64))


def losses(name, batch, rows_sets, **overrides):
    recipe = get_recipe(name, **overrides)
    weights = aggregation_weights(recipe.aggregation, batch.mask, batch.group_ids, 7)
    adv = torch.linspace(-2, 2, batch.mask.shape[0], dtype=F64)[:, None] * batch.mask
    total = torch.zeros_like(batch.logprobs)
    for rows in rows_sets:
        lp = batch.logprobs[rows].clone().requires_grad_(True)
        loss, _ = policy_loss(
            recipe,
            logprobs=lp,
            old_logprobs=batch.old_logprobs[rows],
            advantages=adv[rows],
            loss_weights=weights[rows],
            response_mask=batch.mask[rows],
        )
        loss.backward()
        total[rows] += lp.grad
    return total


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_covariance_selection_is_per_micro_batch(name):
    # As verl: the centring means and the count ⌊r·Σm⌋ are over the rows given, so a split
    # changes which tokens are selected (the registry marks them per_micro_batch).
    batch = random_batch(3, [4, 4], [7, 6, 5, 7, 3, 7, 6, 4], off_policy=0.2)
    whole = losses(name, batch, [torch.arange(8)], cov_ratio=0.2)
    split = losses(name, batch, [torch.arange(4), torch.arange(4, 8)], cov_ratio=0.2)
    assert not torch.allclose(whole, split)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sapo_tau_pos": 2.0}, "sapo_tau_pos=2.0 is read only by surrogate sapo, not 'clip'"),
        ({"is_cap": 5.0}, "is_cap=5.0 is read only by surrogate dppo_tv"),
        ({"kl_ratio_correction": True, "kl": None, "kl_coef": 0.0}, "kl_ratio_correction"),
        ({"surrogate": "clip_cov", "zero_adv_skip": True}, "zero_adv_skip=True"),
        ({"surrogate": "gmpo", "ratio": "sequence"}, "ratio='sequence' is already per sequence"),
        (
            {"top_entropy_quantile": 0.2, "zero_adv_skip": True},
            "zero_adv_skip=True with top_entropy_quantile=0.2",
        ),
        ({"surrogate": "clip_cov", "cov_ratio": 0.0}, "cov_ratio must be in (0, 1]"),
        ({"surrogate": "sapo", "sapo_tau_neg": -1.0}, "sapo_tau_neg must be > 0"),
        ({"top_entropy_quantile": 1.5}, "top_entropy_quantile must be in [0, 1]"),
        ({"surrogate": "clip_cov", "clip_cov_ub": 0.5}, "clip_cov_ub must be > clip_cov_lb"),
    ],
)
def test_settings_that_cannot_take_effect_are_refused(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_recipe("grpo", **overrides)


def test_top_entropy_quantile_needs_entropy():
    batch = random_batch(1, [2], [3, 2])
    recipe = get_recipe("grpo", kl=None, kl_coef=0.0, top_entropy_quantile=0.2)
    with pytest.raises(ValueError, match=r"top_entropy_quantile=0\.2 selects tokens"):
        policy_loss(
            recipe,
            logprobs=batch.logprobs,
            old_logprobs=batch.old_logprobs,
            advantages=batch.mask,
            loss_weights=batch.mask,
            response_mask=batch.mask,
        )


def test_top_entropy_quantile_zeroes_low_entropy_gradients():
    batch = random_batch(2, [2, 2], [5, 4, 6, 3], off_policy=0.0)
    recipe = get_recipe("grpo", kl=None, kl_coef=0.0, top_entropy_quantile=0.2)
    entropy = torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(0), dtype=F64)
    lp = batch.logprobs.clone().requires_grad_(True)
    loss, stats = policy_loss(
        recipe,
        logprobs=lp,
        old_logprobs=batch.logprobs,
        advantages=batch.mask,
        loss_weights=batch.mask / 18,
        response_mask=batch.mask,
        entropy=entropy,
    )
    loss.backward()
    # 18 valid tokens; the top 20 %: ranks above 0.8·17 = 13.6, i.e. 4 tokens move.
    assert int((lp.grad != 0).sum()) == 4
    assert stats.finalize()["grad/token_frac"] == pytest.approx(4 / 18)


def test_the_kl_correction_weighs_by_trls_coef_1():
    """ρ·k with ρ TRL's `coef_1` at the recipe's level (`use_bias_correction_kl`): π/π_old
    per token under token-level ratios (MinPRO's prefix minimum too: it is no importance
    weight of the token's KL), the sequence ratio s_i under GSPO's `ratio: sequence`."""
    batch = random_batch(3, [2, 2], [5, 4, 6, 3])
    kl_terms = {}
    for ratio in ("token", "prefix_min", "sequence"):
        recipe = get_recipe("grpo", ratio=ratio, kl_ratio_correction=True)
        _, stats = policy_loss(
            recipe,
            logprobs=batch.logprobs,
            old_logprobs=batch.old_logprobs,
            advantages=batch.mask,
            loss_weights=batch.mask / 18,
            response_mask=batch.mask,
            ref_logprobs=batch.ref_logprobs,
        )
        kl_terms[ratio] = stats.sums["loss/kl"]
    assert kl_terms["token"] == kl_terms["prefix_min"] != 0
    # By hand: k3 = e^{−Δ_ref} + Δ_ref − 1 per token, s_i = exp(mean_t(logπ − logπ_old)).
    delta_ref = batch.logprobs - batch.ref_logprobs
    k3 = torch.exp(-delta_ref) + delta_ref - 1
    delta = (batch.logprobs - batch.old_logprobs) * batch.mask
    s = (delta.sum(-1) / batch.mask.sum(-1)).exp()
    expected = float((k3 * s[:, None] * batch.mask).sum() / 18)
    # float64 sums of 18 terms of size ~1: rounding ~18·1e-16 relative, far below 1e-12
    assert kl_terms["sequence"] == pytest.approx(expected, rel=1e-12)
    assert kl_terms["sequence"] != pytest.approx(kl_terms["token"], rel=1e-3)
