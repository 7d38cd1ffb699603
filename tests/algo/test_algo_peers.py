"""Peer equality (issue 29): each second-generation choice, fed the same tensors as a
transcription of the peer function it was checked against, gives the same loss and the
same gradient ∂L/∂logπ, within float64 tolerance.

Transcriptions (tests/algo/peers/, headers name the files): verl core_algos.py @
b178a3cd56f58b2d502255daba591e92833930a7; TRL grpo_trainer.py and experimental/gmpo @
f2cd57710ae345ea6428ae95363267fcf38a3dc8, experimental/dppo @
23eedc644caa78d76a63679407229d100c1c6206. Batches: ragged responses with garbage in the
padding, off-policy log-probs, advantages of both signs and zero (one value per response,
as GRPO's), several seeds. Where a convention differs the test shows the mapping
(docs/conventions.md).
"""

from __future__ import annotations

import re

import pytest
import torch
from algo_testlib import F64, mask_of
from peers import trl_grpo_ref as trl
from peers import verl_core_algos_ref as verl

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.entropy_control import AdaptiveEntropy
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.covariance import data_generator, token_covariance
from rlvr.algo.policy.token_selection import top_entropy_mask
from rlvr.algo.regularizers import kl_k3_k2_grad

SEEDS = [0, 1, 2, 3]
LENGTHS = [3, 7, 1, 5, 6, 2, 4, 7]


def batch(seed: int, spread: float = 0.3, adv_scale: float = 1.0, dtype=F64):
    """(logπ leaf, logπ_old, logπ_ref, Â (N, T), mask, Â per response (N,), entropy)."""
    gen = torch.Generator().manual_seed(seed)
    mask = mask_of(LENGTHS).to(dtype)
    n, t = mask.shape
    logprobs = (-2.5 * torch.rand(n, t, generator=gen, dtype=F64) - 0.05).to(dtype)
    old = logprobs + spread * torch.randn(n, t, generator=gen, dtype=F64).to(dtype)
    ref = logprobs + 0.3 * torch.randn(n, t, generator=gen, dtype=F64).to(dtype)
    per_response = adv_scale * torch.randn(n, generator=gen, dtype=F64).to(dtype)
    per_response[[2, 5]] = 0.0  # a zero-advantage response, as a uniform group gives
    entropy = (3.0 * torch.rand(n, t, generator=gen, dtype=F64)).to(dtype)
    garbage = (mask == 0).to(dtype)  # padding: loud values that must not matter
    logprobs = (logprobs * mask - 7.0 * garbage).requires_grad_(True)
    old = old * mask - 3.0 * garbage
    advantages = per_response[:, None] * mask
    return logprobs, old.clamp(max=0.0), ref.clamp(max=0.0), advantages, mask, per_response, entropy


def rlvr_loss(
    name, logprobs, old, advantages, mask, ref=None, entropy=None, sampler=None, **overrides
):
    """rlvr's loss L and ∂L/∂logπ for the named recipe on one whole batch."""
    recipe = get_recipe(name, **overrides)
    group_ids = torch.arange(mask.shape[0])
    weights = aggregation_weights(recipe.aggregation, mask, group_ids, mask.shape[1])
    leaf = logprobs.detach().clone().requires_grad_(True)
    loss, _ = policy_loss(
        recipe,
        logprobs=leaf,
        old_logprobs=old,
        advantages=advantages,
        loss_weights=weights,
        response_mask=mask,
        ref_logprobs=ref,
        sampler_logprobs=sampler,
        entropy=entropy,
    )
    loss.backward()
    return loss.detach(), leaf.grad


def peer_loss(fn, logprobs, *args, **kwargs):
    leaf = logprobs.detach().clone().requires_grad_(True)
    loss = fn(leaf, *args, **kwargs)
    loss.backward()
    return loss.detach(), torch.where(torch.isnan(leaf.grad), 0.0, leaf.grad)


def assert_same(ours, theirs, mask, rtol=1e-6, atol=1e-9):
    """Equal within float tolerance: verl divides by (count + 1e-8), a relative 1e-8 per
    term, which cancellation between signed terms can lift to ~1e-7 of the total."""
    torch.testing.assert_close(ours[0], theirs[0], rtol=rtol, atol=atol)
    # Padding gradients: rlvr's are 0 by construction; a peer's may be too, or garbage ×0.
    torch.testing.assert_close(ours[1] * mask, theirs[1] * mask, rtol=rtol, atol=atol)
    assert torch.all(ours[1][mask == 0] == 0)
    assert ours[1].abs().sum() > 0


# ------------------------------------------------------------------ SAPO


@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_equals_verl_and_trl(seed):
    logprobs, old, _, adv, mask, _, _ = batch(seed)
    ours = rlvr_loss("sapo", logprobs, old, adv, mask)
    v = peer_loss(lambda lp: verl.compute_policy_loss_sapo(old, lp, adv, mask), logprobs)
    t = peer_loss(lambda lp: trl.compute_loss(lp, old, adv, mask, loss_type="sapo"), logprobs)
    assert_same(ours, v, mask)
    assert_same(ours, t, mask)


def test_sapo_temperatures_reach_the_loss():
    logprobs, old, _, adv, mask, _, _ = batch(5, spread=0.8)
    taus = {"sapo_tau_pos": 0.5, "sapo_tau_neg": 3.0}
    ours = rlvr_loss("sapo", logprobs, old, adv, mask, **taus)
    v = peer_loss(
        lambda lp: verl.compute_policy_loss_sapo(old, lp, adv, mask, tau_pos=0.5, tau_neg=3.0),
        logprobs,
    )
    assert_same(ours, v, mask)
    default = rlvr_loss("sapo", logprobs, old, adv, mask)
    assert not torch.allclose(default[0], ours[0])


# ------------------------------------------------------------------ GMPO


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spread", [0.1, 0.6])
def test_gmpo_equals_verl_and_trl(seed, spread):
    # spread 0.6 puts many token log-ratios outside ±0.4, so the clip acts.
    logprobs, old, _, adv, mask, per_response, _ = batch(seed, spread=spread)
    ours = rlvr_loss("gmpo", logprobs, old, adv, mask)
    v = peer_loss(lambda lp: verl.compute_policy_loss_geo_mean(old, lp, adv, mask), logprobs)
    t = peer_loss(lambda lp: trl.gmpo_loss(lp, old, per_response, mask), logprobs)
    assert_same(ours, v, mask)
    assert_same(ours, t, mask)


def test_gmpo_asymmetric_log_bounds():
    logprobs, old, _, adv, mask, per_response, _ = batch(9, spread=0.6)
    ours = rlvr_loss("gmpo", logprobs, old, adv, mask, clip_low=0.2, clip_high=0.5)
    v = peer_loss(
        lambda lp: verl.compute_policy_loss_geo_mean(
            old, lp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.5
        ),
        logprobs,
    )
    t = peer_loss(
        lambda lp: trl.gmpo_loss(lp, old, per_response, mask, epsilon_low=0.2, epsilon_high=0.5),
        logprobs,
    )
    assert_same(ours, v, mask)
    assert_same(ours, t, mask)


# ------------------------------------------------------------------ Clip-Cov, KL-Cov


def seeded_like_rlvr(logprobs, adv, mask) -> int:
    """The seed rlvr's clip_cov draws with; verl draws from the global generator, so the
    test seeds that generator with the same value (equal draws: both are CPU mt19937)."""
    cov = token_covariance(adv, logprobs, mask)
    return data_generator(cov[mask > 0]).initial_seed()


def test_randperm_of_a_seeded_generator_equals_the_global_one():
    torch.manual_seed(1234)
    global_draw = torch.randperm(50)
    torch.testing.assert_close(
        torch.randperm(50, generator=torch.Generator().manual_seed(1234)), global_draw
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cov_ratio", [2e-4, 0.1, 0.3])
def test_clip_cov_equals_verl(seed, cov_ratio):
    # Â ~ 2 and logπ spread over 2.5 nats put many tokens in verl's band 1 < Cov < 5.
    logprobs, old, _, adv, mask, _, _ = batch(seed, adv_scale=2.0)
    cov = token_covariance(adv, logprobs, mask)
    candidates = int(((cov > 1) & (cov < 5) & (mask > 0)).sum())
    assert candidates >= 2  # the draw chooses among several
    overrides = {} if cov_ratio == 2e-4 else {"cov_ratio": cov_ratio}
    ours = rlvr_loss("clip_cov", logprobs, old, adv, mask, **overrides)
    torch.manual_seed(seeded_like_rlvr(logprobs, adv, mask))
    v = peer_loss(
        lambda lp: verl.compute_policy_loss_clip_cov(old, lp, adv, mask, clip_cov_ratio=cov_ratio),
        logprobs,
    )
    assert_same(ours, v, mask)


def test_clip_cov_draw_matters_and_is_reproducible():
    # Another global seed in verl selects other tokens: the equality above is not luck.
    logprobs, old, _, adv, mask, _, _ = batch(1, adv_scale=2.0)
    ours = rlvr_loss("clip_cov", logprobs, old, adv, mask)
    assert torch.equal(ours[1], rlvr_loss("clip_cov", logprobs, old, adv, mask)[1])
    grads = set()
    for s in range(20):
        torch.manual_seed(s)
        g = peer_loss(lambda lp: verl.compute_policy_loss_clip_cov(old, lp, adv, mask), logprobs)
        grads.add(tuple((g[1] == 0).flatten().tolist()))
    assert len(grads) > 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cov_ratio", [2e-4, 0.1, 0.3])
def test_kl_cov_equals_verl(seed, cov_ratio):
    logprobs, old, _, adv, mask, _, _ = batch(seed, spread=0.4)
    overrides = {} if cov_ratio == 2e-4 else {"cov_ratio": cov_ratio}
    ours = rlvr_loss("kl_cov", logprobs, old, adv, mask, **overrides)
    v = peer_loss(
        lambda lp: verl.compute_policy_loss_kl_cov(old, lp, adv, mask, kl_cov_ratio=cov_ratio),
        logprobs,
    )
    assert_same(ours, v, mask)
    coef = rlvr_loss("kl_cov", logprobs, old, adv, mask, kl_cov_coef=0.3, cov_ratio=0.3)
    v = peer_loss(
        lambda lp: verl.compute_policy_loss_kl_cov(
            old, lp, adv, mask, kl_cov_ratio=0.3, ppo_kl_coef=0.3
        ),
        logprobs,
    )
    assert_same(coef, v, mask)


# ------------------------------------------------------------------ DPPO


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spread", [0.2, 1.0])
def test_dppo_binary_tv_equals_trl(seed, spread):
    # On-policy (π_old = π) with a sampler that differs: the batch's "old" is the sampler's
    # log-probs μ, which the recipe's default dppo_anchor='sampler' measures π against, as TRL.
    logprobs, sampler, _, adv, mask, _, _ = batch(seed, spread=spread)
    ours = rlvr_loss("dppo", logprobs, logprobs.detach(), adv, mask, sampler=sampler)
    t = peer_loss(lambda lp: trl.dppo_binary_tv_loss(lp, sampler, adv, mask, mask.sum()), logprobs)
    assert_same(ours, t, mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_dppo_anchor_old_equals_trl_fed_pi_old(seed):
    # dppo_anchor='old': the same loss with π_old in μ's place; the sampler is not read.
    logprobs, old, _, adv, mask, _, _ = batch(seed, spread=1.0)
    ours = rlvr_loss("dppo", logprobs, old, adv, mask, sampler=old + 5.0, dppo_anchor="old")
    t = peer_loss(lambda lp: trl.dppo_binary_tv_loss(lp, old, adv, mask, mask.sum()), logprobs)
    assert_same(ours, t, mask)


def test_dppo_mask_acts_on_policy_only_when_anchored_on_the_sampler():
    logprobs, sampler, _, adv, mask, _, _ = batch(0, spread=1.0)
    on_policy = logprobs.detach()  # π_old = π: one optimizer step per batch
    active = (adv != 0) & (mask > 0)
    anchored = rlvr_loss("dppo", logprobs, on_policy, adv, mask, sampler=sampler)[1]
    assert (anchored[active] == 0).any() and (anchored[active] != 0).any()
    # Against π_old the probability change is 0 on-policy: no token is masked, ρ = 1, so
    # the gradient is plain importance sampling's −Â/|tokens| on every active token.
    old = rlvr_loss("dppo", logprobs, on_policy, adv, mask, sampler=sampler, dppo_anchor="old")
    reinforce = rlvr_loss("dppo", logprobs, on_policy, adv, mask, surrogate="reinforce")
    torch.testing.assert_close(old[1], reinforce[1], rtol=0, atol=1e-15)
    assert (old[1][active] != 0).all()


def test_dppo_without_sampler_logprobs_warns_and_measures_against_pi_old():
    logprobs, old, _, adv, mask, _, _ = batch(1, spread=1.0)
    with pytest.warns(UserWarning, match="dppo_anchor='sampler' but no sampler log-probs"):
        fallback = rlvr_loss("dppo", logprobs, old, adv, mask)
    explicit = rlvr_loss("dppo", logprobs, old, adv, mask, dppo_anchor="old")
    assert torch.equal(fallback[1], explicit[1])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dppo_anchor": "behaviour"}, "dppo_anchor must be 'old' or 'sampler', got 'behaviour'"),
        (
            {"rollout_correction": "token_tis"},
            "dppo_anchor='sampler' already weighs by π/π_sampler",
        ),
        ({"tis_cap": 2.0}, "a rollout correction (token_tis)"),
    ],
)
def test_dppo_anchor_settings_are_checked(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_recipe("dppo", **overrides)
    with pytest.raises(ValueError, match="dppo_anchor='old' is read only by surrogate dppo_tv"):
        get_recipe("grpo", dppo_anchor="old")
    get_recipe("dppo", dppo_anchor="old", rollout_correction="token_tis")  # π_old/μ once


# ------------------------------------------------------------------ KL variants


@pytest.mark.parametrize("seed", SEEDS)
def test_k3_plus_equals_verl_straight_through(seed):
    logprobs, _, ref, _, mask, _, _ = batch(seed)
    ours = peer_loss(lambda lp: (kl_k3_k2_grad(lp, ref) * mask).sum(), logprobs)
    theirs = peer_loss(lambda lp: (verl.kl_penalty(lp, ref, "k3+") * mask).sum(), logprobs)
    assert_same(ours, theirs, mask)
    # Value of k3, gradient of k2 = Δ_ref.
    k3 = peer_loss(lambda lp: (verl.kl_penalty(lp, ref, "k3") * mask).sum(), logprobs)
    torch.testing.assert_close(ours[0], k3[0])
    torch.testing.assert_close(ours[1], (logprobs.detach() - ref) * mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_importance_corrected_k3_equals_trl_bias_correction(seed):
    logprobs, old, ref, adv, mask, _, _ = batch(seed)
    ours = rlvr_loss("grpo", logprobs, old, adv, mask, ref=ref, kl_ratio_correction=True)
    t = peer_loss(
        lambda lp: trl.compute_loss(
            lp, old, adv, mask, beta=0.04, ref_per_token_logps=ref, use_bias_correction_kl=True
        ),
        logprobs,
    )
    assert_same(ours, t, mask)
    plain = rlvr_loss("grpo", logprobs, old, adv, mask, ref=ref)
    t_plain = peer_loss(
        lambda lp: trl.compute_loss(lp, old, adv, mask, beta=0.04, ref_per_token_logps=ref),
        logprobs,
    )
    assert_same(plain, t_plain, mask)
    assert not torch.allclose(plain[1], ours[1])


# ------------------------------------------------------------------ 80/20 and entropy


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5, 1.0])
def test_top_entropy_mask_equals_trl(seed, quantile):
    _, _, _, _, mask, _, entropy = batch(seed, dtype=torch.float32)
    ours = top_entropy_mask(entropy, mask, quantile)
    theirs = trl.get_high_entropy_mask(entropy, mask, 1 - quantile)
    assert torch.equal(ours, theirs)
    valid = int(mask.sum())
    if quantile == 0.0:
        assert int(ours.sum()) == 1
    if (
        quantile == 0.2
    ):  # the top 7 of the 35 valid tokens: rank > 0.8·34 = 27.2 (distinct entropies)
        assert valid == 35 and int(ours.sum()) == 7


@pytest.mark.parametrize("seed", SEEDS)
def test_top_entropy_quantile_loss_equals_trl(seed):
    # TRL loss_type "grpo" ↔ rlvr seq_mean_token_mean; "dapo" ↔ token_mean, whose entropy
    # bonus TRL also divides by the token count, as rlvr aggregates it (docs/conventions.md).
    logprobs, old, _, adv, mask, _, entropy = batch(seed)
    ours = rlvr_loss(
        "grpo",
        logprobs,
        old,
        adv,
        mask,
        entropy=entropy,
        kl=None,
        kl_coef=0.0,
        top_entropy_quantile=0.2,
    )
    t = peer_loss(
        lambda lp: trl.compute_loss(
            lp, old, adv, mask, entropies=entropy, top_entropy_quantile=0.2
        ),
        logprobs,
    )
    assert_same(ours, t, mask)
    ours = rlvr_loss(
        "dapo",
        logprobs,
        old,
        adv,
        mask,
        entropy=entropy,
        clip_high=0.2,
        top_entropy_quantile=0.2,
        entropy_coef=0.01,
    )
    t = peer_loss(
        lambda lp: trl.compute_loss(
            lp,
            old,
            adv,
            mask,
            loss_type="dapo",
            entropies=entropy,
            top_entropy_quantile=0.2,
            entropy_coef=0.01,
        ),
        logprobs,
    )
    assert_same(ours, t, mask)


def test_adaptive_entropy_follows_trl():
    ours = AdaptiveEntropy(coef=0.01, target=0.5, delta=0.004, coef_min=0.0, coef_max=0.02)
    theirs = trl.AdaptiveEntropyController(0.01, entropy_target=0.5, delta=0.004, coef_max=0.02)
    for entropy in [0.9, 0.4, 0.3, 0.2, 0.6, 0.5, 0.1, 0.1, 0.1, 0.7, 0.8, 0.9, 1.0]:
        assert ours.applied_coef() == theirs.apply_coef()
        ours = ours.update(entropy)
        theirs.step(entropy)
        assert ours.coef == pytest.approx(theirs.entropy_coef, abs=1e-15)
