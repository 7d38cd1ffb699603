"""Issue 43, items 2, 4 and 5, against TRL; and the deliberate differences that remain,
each pinned on rlvr's side (docs/conventions.md has one row per difference).

TRL @ f2cd57710ae345ea6428ae95363267fcf38a3dc8 (tests/algo/peers/trl_grpo_ref.py):
GRPOTrainer `_compute_loss` with importance_sampling_level "sequence" (GSPO), its
`use_bias_correction_kl` (coef_1 at that level) and `top_entropy_quantile`; GMPOTrainer
with its entropy mask on the geometric mean; DPPOTrainer @ 23eedc64 (binary TV). verl
@ 1dda039b (tests/algo/peers/verl_fidelity_ref.py) and @ b178a3cd (verl_core_algos_ref.py)
for the pins. Batches and the equality helper are test_algo_peers.py's.
"""

from __future__ import annotations

import math

import pytest
import torch
from algo_testlib import F64, mask_of
from peers import trl_grpo_ref as trl
from peers import verl_core_algos_ref as verl_b178
from peers import verl_fidelity_ref as verl
from test_algo_peers import assert_same, batch, peer_loss, rlvr_loss

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.covariance import kl_cov_selection, token_covariance
from rlvr.algo.policy.token_selection import top_entropy_mask

SEEDS = [0, 1, 2, 3]


# ------------------------------------------------------------------ item 2: GSPO's KL


@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_kl_correction_equals_trl_at_sequence_level(seed):
    """TRL weighs the k3 KL by coef_1, the sequence ratio s_i under
    importance_sampling_level="sequence": rlvr's kl_ratio_correction under ratio: sequence."""
    logprobs, old, ref, adv, mask, _, _ = batch(seed)
    fields = {"kl": "k3", "kl_coef": 0.04, "kl_ratio_correction": True}
    ours = rlvr_loss("gspo", logprobs, old, adv, mask, ref=ref, **fields)

    def theirs(lp, level):
        return trl.compute_loss(
            lp,
            old,
            adv,
            mask,
            epsilon_low=3e-4,
            epsilon_high=4e-4,
            beta=0.04,
            ref_per_token_logps=ref,
            use_bias_correction_kl=True,
            importance_sampling_level=level,
        )

    assert_same(ours, peer_loss(lambda lp: theirs(lp, "sequence"), logprobs), mask)
    # Not vacuous: weighing k3 by π/π_old per token (rlvr's weight before) is another KL
    # term on this batch, by far more than the tolerance.
    delta_ref = logprobs.detach() - ref
    k3 = (torch.exp(-delta_ref) + delta_ref - 1) * mask
    delta = (logprobs.detach() - old) * mask
    s_i = (delta.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)).exp()
    per_response = lambda w: ((k3 * w).sum(-1) / mask.sum(-1)).mean()  # noqa: E731
    assert abs(float(per_response(s_i) - per_response(delta.exp()))) > 1e-4


# ------------------------------------------------------------------ item 4: the 80/20 rule


@pytest.mark.parametrize("seed", SEEDS)
def test_gmpo_top_entropy_equals_trl(seed):
    """TRL's GMPOTrainer drops the low-entropy tokens from the geometric mean: only the
    top-ρ tokens keep a gradient; a response with none selected has exp(0) = 1, so its loss
    is −Â with no gradient."""
    logprobs, old, _, adv, mask, per_response, entropy = batch(seed, spread=0.6)
    entropy = entropy.clone()
    entropy[0] = 0.0  # response 0 (3 tokens, Â ≠ 0) has no top-entropy token
    fields = {"top_entropy_quantile": 0.2}
    ours = rlvr_loss("gmpo", logprobs, old, adv, mask, entropy=entropy, **fields)
    theirs = peer_loss(
        lambda lp: trl.gmpo_loss(
            lp, old, per_response, mask, entropies=entropy, top_entropy_quantile=0.2
        ),
        logprobs,
    )
    assert_same(ours, theirs, mask)
    selected = top_entropy_mask(entropy, mask, 0.2)
    assert torch.all(ours[1][(mask > 0) & ~selected] == 0)
    assert (ours[1][selected] != 0).sum() >= 5
    assert not selected[0].any() and per_response[0] != 0


@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_top_entropy_equals_trl_at_sequence_level(seed):
    """Under a sequence ratio TRL multiplies the broadcast sequence loss by the entropy
    mask: each response's ℓ_i weighs by the share of its tokens selected, and the gradient
    reaches every token of a response with one selected, through s_i (docs/algorithms.md
    §3); a response with none selected gets no gradient."""
    logprobs, old, _, adv, mask, _, entropy = batch(seed, spread=0.05)
    fields = {"top_entropy_quantile": 0.2, "zero_adv_skip": False}
    fields |= {"clip_low": 0.2, "clip_high": 0.2}  # few responses clipped at this spread
    ours = rlvr_loss("gspo", logprobs, old, adv, mask, entropy=entropy, **fields)
    theirs = peer_loss(
        lambda lp: trl.compute_loss(
            lp,
            old,
            adv,
            mask,
            entropies=entropy,
            top_entropy_quantile=0.2,
            importance_sampling_level="sequence",
        ),
        logprobs,
    )
    assert_same(ours, theirs, mask)
    selected = top_entropy_mask(entropy, mask, 0.2)
    has_selected = selected.any(-1)
    low = (mask > 0) & ~selected
    assert (ours[1][low & has_selected[:, None]] != 0).any()  # low-entropy tokens move
    assert torch.all(ours[1][~has_selected] == 0)


# ------------------------------------------------------------------ item 5: DPPO's mask


@pytest.mark.parametrize("seed", SEEDS)
def test_dppo_masks_what_trl_masks_beyond_the_clamp(seed):
    """Tokens whose log π − log μ < −20 with Â < 0 (π = e^−25.5, μ = ½): TRL masks them
    (μ − π = 0.5 > δ = 0.15). μ rebuilt from the ratio clamped at −20 would be
    π·e^20 = e^−5.5 = 0.004, inside the region, weight e^−20; rlvr now reads the unclamped
    log-ratio, so the loss, the gradient and clip/low_frac are TRL's."""
    logprobs, sampler, _, adv, mask, per_response, _ = batch(seed, spread=0.2)
    planted = torch.zeros_like(mask, dtype=torch.bool)
    planted[per_response < 0, 0] = True  # the first token of every Â < 0 response
    logprobs = logprobs.detach().masked_fill(planted, -25.5)
    sampler = sampler.masked_fill(planted, math.log(0.5))
    recipe = get_recipe("dppo")
    leaf = logprobs.clone().requires_grad_(True)
    loss, stats = policy_loss(
        recipe,
        logprobs=leaf,
        old_logprobs=logprobs,
        advantages=adv,
        loss_weights=aggregation_weights("token_mean", mask, torch.arange(len(mask))),
        response_mask=mask,
        sampler_logprobs=sampler,
    )
    loss.backward()
    theirs = peer_loss(
        lambda lp: trl.dppo_binary_tv_loss(lp, sampler, adv, mask, mask.sum()), logprobs
    )
    assert_same((loss.detach(), leaf.grad), theirs, mask)
    prob, mu = logprobs.exp(), sampler.exp()
    trl_masked_low = ((prob - mu).abs() > 0.15) & (prob < mu) & (adv < 0) & (mask > 0)
    active = (adv != 0) & (mask > 0)
    assert planted.sum() >= 2 and torch.all(trl_masked_low[planted])
    assert stats.finalize()["clip/low_frac"] == pytest.approx(
        float(trl_masked_low.sum() / active.sum()), rel=1e-12
    )
    clamped_mu = (logprobs - (logprobs - sampler).clamp(-20, 20)).exp()
    assert torch.all((clamped_mu - prob)[planted] < 0.15)  # the old rebuild kept them


# ------------------------------------------------------------------ deliberate differences


def one_response(deltas, advantage):
    """One response whose log-ratios Δ_t = logπ − logπ_old are `deltas`, Â on every token."""
    old = torch.full((1, len(deltas)), -30.0, dtype=F64)
    logprobs = old + torch.tensor([deltas], dtype=F64)
    mask = torch.ones_like(old)
    return logprobs, old, torch.full_like(old, advantage), mask


def test_gmpo_clamps_log_ratios_at_20():
    """rlvr clamps Δ to ±20 before every ratio (rlvr/algo/policy/ratios.py); verl's geo_mean and
    TRL's GMPOTrainer do not. Â = −1, Δ = (25, 0.1), ε = 0.4: the sign-aware clip keeps
    Δ ≥ −0.4, so rlvr's Δ̃ = (20, 0.1): ℓ = exp((20 + 0.1)/2) = exp(10.05), the clamped
    token has no gradient, the other ∂ℓ/∂logπ = exp(10.05)/2; the peers: exp(12.55)."""
    logprobs, old, adv, mask = one_response([25.0, 0.1], -1.0)
    ours = rlvr_loss("gmpo", logprobs, old, adv, mask)
    # float64, two terms: relative rounding ~1e-16
    assert float(ours[0]) == pytest.approx(math.exp(10.05), rel=1e-12)
    torch.testing.assert_close(
        ours[1], torch.tensor([[0.0, math.exp(10.05) / 2]], dtype=F64), rtol=1e-12, atol=0
    )
    theirs = peer_loss(lambda lp: verl.compute_policy_loss_geo_mean(old, lp, adv, mask), logprobs)
    assert float(theirs[0]) == pytest.approx(math.exp(12.55), rel=1e-7)


def test_clip_cov_clamps_log_ratios_at_20():
    """Clip-Cov's PPO clip reads the clamped ratio; verl's compute_policy_loss_clip_cov does
    not clamp. Â = −1, Δ = (25, 0.1), no token in the covariance band (lb, ub) = (100, 200):
    ℓ = max(−ρÂ, −clip(ρ)Â) = (e^20, e^0.1), token-mean (e^20 + e^0.1)/2; verl's e^25."""
    logprobs, old, adv, mask = one_response([25.0, 0.1], -1.0)
    band = {"clip_cov_lb": 100.0, "clip_cov_ub": 200.0}
    ours = rlvr_loss("clip_cov", logprobs, old, adv, mask, **band)
    # float64, two terms: relative rounding ~1e-16
    assert float(ours[0]) == pytest.approx((math.exp(20) + math.exp(0.1)) / 2, rel=1e-12)
    assert ours[1][0, 0] == 0
    theirs = peer_loss(
        lambda lp: verl_b178.compute_policy_loss_clip_cov(
            old, lp, adv, mask, clip_cov_lb=100.0, clip_cov_ub=200.0
        ),
        logprobs,
    )
    assert float(theirs[0]) == pytest.approx((math.exp(25) + math.exp(0.1)) / 2, rel=1e-9)


def test_kl_cov_clamps_log_ratios_at_20():
    """KL-Cov reads ρ and |Δ| through the same clamp; verl's compute_policy_loss_kl_cov does
    not. Δ = (25, 0.1), Â = −1, cov_ratio 0.5 (one token selected, s_t): rlvr
    ℓ_t = ρ_t + s_t·|Δ_t| with ρ_0 = e^20 and |Δ_0| = 20, token-mean over 2."""
    logprobs, old, adv, mask = one_response([25.0, 0.1], -1.0)
    ours = rlvr_loss("kl_cov", logprobs, old, adv, mask, cov_ratio=0.5)
    selected = kl_cov_selection(token_covariance(adv, logprobs, mask), mask, 0.5)
    clamped = torch.tensor([[20.0, 0.1]], dtype=F64)
    expected = ((clamped.exp() + selected * clamped.abs()) * mask).sum() / 2
    # float64, two terms of size e^20: relative rounding ~1e-16
    assert float(ours[0]) == pytest.approx(float(expected), rel=1e-12)
    assert ours[1][0, 0] == 0  # past the clamp Δ_0 has no gradient
    theirs = peer_loss(
        lambda lp: verl_b178.compute_policy_loss_kl_cov(old, lp, adv, mask, kl_cov_ratio=0.5),
        logprobs,
    )
    assert float(theirs[0]) > math.exp(24)  # e^25/2: the peer's ratio is not clamped


def test_dppo_weight_floor_differs_from_verls_only_below_e_minus_20():
    """verl's compute_policy_loss_dppo_tv (@ 1dda039b) clamps log π − log μ to ±20 before its
    IS weight min(ρ, C); rlvr follows TRL: Δ = −25 inside the trust region (Â > 0, π < μ)
    weighs e^−25, verl's e^−20. ∂ℓ/∂logπ_0 = −w·Â/2 for token-mean over 2 tokens."""
    logprobs = torch.tensor([[-25.5, -1.0]], dtype=F64)
    anchor = torch.tensor([[-0.5, -1.0]], dtype=F64)
    adv, mask = torch.ones_like(logprobs), torch.ones_like(logprobs)
    ours = rlvr_loss("dppo", logprobs, logprobs.detach(), adv, mask, sampler=anchor)
    # exp of a float64: relative rounding ~1e-16
    assert float(ours[1][0, 0]) == pytest.approx(-math.exp(-25.0) / 2, rel=1e-12)
    theirs = peer_loss(lambda lp: verl.compute_policy_loss_dppo_tv(anchor, lp, adv, mask), logprobs)
    assert float(theirs[1][0, 0]) == pytest.approx(-math.exp(-20.0) / 2, rel=1e-12)
    torch.testing.assert_close(ours[1][0, 1], theirs[1][0, 1], rtol=1e-12, atol=0)


def test_gmpo_refuses_token_mis():
    """A token MIS weight of 0 has no geometric mean: verl's fold log(0 + 1e-10) scales
    the response by 10^(−10/|y|), from 3e-3 at 4 tokens to 0.98 at 1000."""
    with pytest.raises(ValueError, match="surrogate='gmpo' with rollout_correction='token_mis'"):
        get_recipe("gmpo", rollout_correction="token_mis")
    get_recipe("gmpo", rollout_correction="token_tis")  # folded, as verl
    get_recipe("gmpo", rollout_correction="token_rs")  # the token leaves the mean, as verl


def test_fold_of_a_zero_weight_would_depend_on_the_length():
    # Why token_mis is refused: (1e-10)^(1/4) = 3.2e-3, (1e-10)^(1/1000) = 0.977.
    for length, expected in ((4, 10 ** (-10 / 4)), (1000, 10 ** (-10 / 1000))):
        weight = torch.ones(1, length, dtype=F64)
        weight[0, 0] = 0.0
        mask = mask_of([length])
        folded = verl.compute_policy_loss_geo_mean(
            torch.zeros_like(mask), torch.zeros_like(mask), -mask, mask, rollout_is_weights=weight
        )
        assert float(folded) == pytest.approx(expected, rel=1e-6)
