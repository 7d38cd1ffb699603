"""The full objective, prepare_batch → policy_loss: method properties and reductions."""

import math

import pytest
import torch
from algo_testlib import (
    F64,
    Batch,
    loss_and_grad,
    loss_of_rows,
    mask_of,
    padded,
    prepare,
    random_batch,
)

from rlvr.algo import RECIPES, get_recipe, policy_loss, prepare_batch, selection_metrics
from rlvr.algo.advantages.estimators import EPS
from rlvr.algo.registry import AGGREGATIONS, SURROGATES

close = torch.testing.assert_close


def hand_batch(deltas, rewards, group_ids, max_new_tokens=8, correct=None) -> Batch:
    """logπ_old = −1 everywhere, logπ = logπ_old + Δ; ref = logπ (no KL gradient)."""
    lengths = [len(d) for d in deltas]
    mask = mask_of(lengths)
    old = torch.full_like(mask, -1.0)
    logprobs = old + padded(deltas)
    rewards_t = torch.tensor(rewards, dtype=F64)
    return Batch(
        group_ids=torch.tensor(group_ids),
        mask=mask,
        logprobs=logprobs,
        old_logprobs=old,
        ref_logprobs=logprobs.clone(),
        values=torch.zeros_like(mask),
        rewards=rewards_t,
        correct=rewards_t if correct is None else torch.tensor(correct, dtype=F64),
        truncated=torch.tensor(lengths) >= max_new_tokens,
        max_new_tokens=max_new_tokens,
    )


# ------------------------------------------------------------------ GSPO


def test_gspo_one_clip_decision_per_response():
    # ε = 0.1, one group, rewards (1, 0, 1, 0) → Â = (+a, −a, +a, −a).
    #   r0 Δ = (0.5, 0.1): mean 0.3, s = e^0.3 = 1.35 > 1.1, Â > 0 → clipped (both tokens,
    #      though token-level t1 = e^0.1 = 1.105 would not be)
    #   r1 Δ = (0.1, −0.2, 0.4): mean 0.1, s = 1.105, Â < 0 → not clipped
    #   r2 Δ = (0.05, −0.05): s = 1 → not clipped
    #   r3 Δ = (−0.9, 0, 0): mean −0.3, s = 0.741 < 0.9, Â < 0 → clipped (all three tokens)
    # seq_frac = 2/4; token clip/frac = (2 + 3)/10.
    recipe = get_recipe("gspo", clip_low=0.1, clip_high=0.1)
    batch = hand_batch(
        [[0.5, 0.1], [0.1, -0.2, 0.4], [0.05, -0.05], [-0.9, 0.0, 0.0]], [1, 0, 1, 0], [0] * 4
    )
    prepared = prepare(recipe, batch)
    logprobs = batch.logprobs.clone().requires_grad_(True)
    loss, stats = loss_of_rows(recipe, batch, prepared, logprobs, torch.arange(4))
    loss.backward()
    valid = batch.mask > 0
    for i, clipped in enumerate([True, False, False, True]):
        grads = logprobs.grad[i][valid[i]]
        assert torch.all(grads == 0) if clipped else torch.all(grads != 0), (i, grads)
    metrics = stats.finalize()
    assert metrics["clip/seq_frac"] == 0.5
    assert metrics["clip/frac"] == 0.5
    assert metrics["clip/high_frac"] == 0.2 and metrics["clip/low_frac"] == 0.3


def test_gspo_default_bounds_clip_whole_responses():
    recipe = get_recipe("gspo")
    batch = random_batch(3, [4, 4], [2, 5, 3, 7, 1, 4, 6, 2], off_policy=2e-3)
    prepared = prepare(recipe, batch)
    _, grad = loss_and_grad(recipe, batch, prepared)
    for i in range(8):
        row = grad[i][batch.mask[i] > 0]
        assert torch.all(row == 0) or torch.all(row != 0)


# ------------------------------------------------------------------ Dr. GRPO vs GRPO


def test_dr_grpo_gradient_per_token_is_length_independent_grpo_is_not():
    # One group, rewards (1, 1, 0), lengths (2, 5, 3), on-policy (ρ = 1, ∂ℓ/∂logπ = −Â).
    # Dr. GRPO: Â = r − 1/3 = (1/3, 1/3, −2/3), w = 1/(N·L) = 1/(3·8)
    #   → ∂L/∂logπ = −(1/3)/24 = −1/72 on every token of rows 0 and 1.
    # GRPO: std = √((1/9 + 1/9 + 4/9)/2) = √(1/3), Â_0 = Â_1 = (1/3)/(√(1/3) + ε) = a,
    #   w = 1/(N·|y|) → row 0: −a/6, row 1: −a/15 (ratio 5/2). KL gradient is 0 (logπ = ref).
    deltas = [[0.0] * 2, [0.0] * 5, [0.0] * 3]
    batch = hand_batch(deltas, [1, 1, 0], [0, 0, 0])
    dr = get_recipe("dr_grpo")
    _, grad = loss_and_grad(dr, batch, prepare(dr, batch))
    close(grad[0, :2], torch.full((2,), -1 / 72, dtype=F64), rtol=1e-12, atol=0)
    close(grad[1, :5], torch.full((5,), -1 / 72, dtype=F64), rtol=1e-12, atol=0)
    grpo = get_recipe("grpo")
    _, grad = loss_and_grad(grpo, batch, prepare(grpo, batch))
    a = (1 / 3) / (math.sqrt(1 / 3) + EPS)
    close(grad[0, :2], torch.full((2,), -a / 6, dtype=F64), rtol=1e-12, atol=0)
    close(grad[1, :5], torch.full((5,), -a / 15, dtype=F64), rtol=1e-12, atol=0)


# ------------------------------------------------------------------ CISPO vs REINFORCE


@pytest.mark.parametrize("off_policy", [0.0, 0.3])
def test_cispo_equals_reinforce_when_nothing_is_clipped(off_policy):
    # CISPO bounds (0, 4]: with |Δ| ≲ 1 no weight is clipped, so sg(clip(ρ)) = sg(ρ).
    batch = random_batch(11, [3, 4, 2], [3, 1, 6, 2, 5, 7, 4, 2, 3], off_policy=off_policy)
    if off_policy == 0.0:
        batch.old_logprobs = batch.logprobs.clone()
    delta = (batch.logprobs - batch.old_logprobs)[batch.mask > 0]
    assert delta.abs().max() < math.log(4.0)
    cispo = get_recipe("cispo")
    reinforce = get_recipe("cispo", surrogate="reinforce")
    loss_c, grad_c = loss_and_grad(cispo, batch, prepare(cispo, batch))
    loss_r, grad_r = loss_and_grad(reinforce, batch, prepare(reinforce, batch))
    # float64, the same operations on the same tensors but one stop-gradient: each gradient
    # element is one product of terms ~1 (ε·few ≈ 1e-15 apart at most).
    close(grad_c, grad_r, rtol=1e-12, atol=1e-15)
    assert math.isclose(loss_c, loss_r, rel_tol=1e-12, abs_tol=1e-15)
    assert grad_c.abs().sum() > 0


# ------------------------------------------------------------------ GSPO-token


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("clip", [None, 0.05])
def test_sequence_token_equals_sequence_for_constant_advantages(aggregation, clip):
    overrides = {"aggregation": aggregation}
    if clip is not None:
        overrides |= {"clip_low": clip, "clip_high": clip}
    batch = random_batch(5, [3, 3], [2, 6, 3, 1, 5, 4], off_policy=0.1)
    seq = get_recipe("gspo", **overrides)
    tok = get_recipe("gspo", ratio="sequence_token", **overrides)
    prepared = prepare(seq, batch)
    loss_s, grad_s = loss_and_grad(seq, batch, prepared)
    loss_t, grad_t = loss_and_grad(tok, batch, prepared)
    assert math.isclose(loss_s, loss_t, rel_tol=1e-12, abs_tol=1e-15)
    # float64: the sequence ratio exp(mean Δ) against its per-token form sums |y| ≤ 8
    # log-ratios in other orders and goes through exp: ≤ 8·ε·|Δ|·e^{|Δ|} ≲ 1e-14 per element.
    close(grad_s, grad_t, rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------ zero-advantage skip


# Every named recipe whose zero-advantage rows carry no gradient at all: no KL in the loss
# or in the reward, no critic (GAE gives them non-zero Â), no entropy or NLL term, no
# teacher (its term gives uniform groups non-zero Â), no per-micro-batch surrogate (Clip-Cov,
# KL-Cov: zero-advantage rows enter their token statistics, so Recipe refuses the skip).
SKIPPABLE = sorted(
    name
    for name, r in RECIPES.items()
    if not (r.needs_reference or r.needs_critic or r.entropy_coef or r.nll_coef)
    and not r.teacher_kl_coef
    and not SURROGATES.get(r.surrogate).per_micro_batch
)


@pytest.mark.parametrize("name", SKIPPABLE)
def test_zero_advantage_skip_leaves_loss_and_gradient_unchanged(name):
    recipe = get_recipe(name)
    # Groups 0 and 2 have uniform correctness (all-zero advantages), 1 and 3 are mixed.
    batch = random_batch(
        7, [3, 3, 2, 2], [2, 5, 3, 4, 1, 6, 7, 2, 3, 3], correct=[1, 1, 1, 0, 1, 0, 0, 0, 1, 0]
    )
    prepared = prepare(recipe, batch)
    zero = (prepared.advantages == 0).all(-1)
    assert zero.any() and not zero.all()
    loss_full, grad_full = loss_and_grad(recipe, batch, prepared)
    active = (~zero).nonzero().squeeze(-1)
    loss_skip, grad_skip = loss_and_grad(recipe, batch, prepared, [active])
    assert math.isclose(loss_full, loss_skip, rel_tol=1e-12, abs_tol=1e-15)
    # float64: skipping rows whose every advantage is 0 leaves out exact zeros from the sums,
    # so only the order of the remaining ~1-sized terms can change (≤ n·ε ≈ 1e-15).
    close(grad_skip, grad_full, rtol=1e-12, atol=1e-15)
    assert torch.all(grad_full[zero] == 0)


# ------------------------------------------------------------------ DAPO selection


def test_dapo_filters_on_raw_correctness_advantages_use_shaped_reward():
    # L_max = 8, L_c = 2 (ramp after 6 tokens; length 8 → −1).
    # Group 0: correct (1, 1), lengths (3, 8): shaped (1, 0) differ, but correctness is
    #   uniform → dropped (filtering on the shaped reward would wrongly keep it).
    # Group 1: correct (1, 0), lengths (8, 3): shaped (1 − 1, 0) = (0, 0) equal, correctness
    #   mixed → kept, Â = 0 (constant shaped rewards); its 11 tokens stay in the normalizer.
    # Group 2: correct (1, 0), lengths (2, 2): shaped (1, 0) → Â = ±0.5/(√0.5 + ε).
    # token_mean over kept tokens: 8 + 3 + 2 + 2 = 15 → w = 1/15.
    recipe = get_recipe("dapo", overlong_cache=2)
    lengths = [3, 8, 8, 3, 2, 2]
    batch = hand_batch([[0.0] * n for n in lengths], [1, 1, 1, 0, 1, 0], [0, 0, 1, 1, 2, 2])
    prepared = prepare(recipe, batch)
    assert prepared.keep.tolist() == [False, False, True, True, True, True]
    close(prepared.shaped_rewards, torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=F64))
    a = 0.5 / (math.sqrt(0.5) + EPS)
    expected_adv = torch.zeros(6, 8, dtype=F64)
    expected_adv[4, :2], expected_adv[5, :2] = a, -a
    close(prepared.advantages, expected_adv, rtol=1e-12, atol=0)
    expected_w = batch.mask * torch.tensor([0, 0, 1, 1, 1, 1], dtype=F64)[:, None] / 15
    close(prepared.loss_weights, expected_w, rtol=1e-12, atol=0)
    metrics = selection_metrics(prepared, batch.group_ids)
    assert metrics["rollout/kept_groups"] == 2 and metrics["rollout/kept_responses"] == 4
    assert metrics["rollout/trained_tokens"] == 15  # 8 + 3 + 2 + 2, as the normalizer


# ------------------------------------------------------------------ ScaleRL zero-variance filter


def test_scalerl_zero_variance_filter_leaves_batch_and_normalizer():
    # g0 r = (1, 1), lengths (2, 3) → zero variance; g1 r = (1, 0), lengths (1, 3);
    # g2 r = (0, 1, 1), lengths (2, 2, 4).
    # Filtered: P = 2 → w(g1) = 1/(2·4) = 0.125, w(g2) = 1/(2·8) = 0.0625, w(g0) = 0.
    # Unfiltered: P = 3 → 1/(3·5), 1/(3·4), 1/(3·8).
    # batch_norm on the kept rows: x = (0.5, −0.5, −2/3, 1/3, 1/3), Σx² = 0.5 + 6/9 = 7/6,
    #   unbiased std = √((7/6)/4); unfiltered adds two zeros: √((7/6)/6).
    lengths = [2, 3, 1, 3, 2, 2, 4]
    batch = hand_batch([[0.0] * n for n in lengths], [1, 1, 1, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2, 2])
    x = torch.tensor([0.0, 0.0, 0.5, -0.5, -2 / 3, 1 / 3, 1 / 3], dtype=F64)
    cases = {
        True: ([0, 0, 0.125, 0.125, 0.0625, 0.0625, 0.0625], math.sqrt((7 / 6) / 4)),
        False: ([1 / 15] * 2 + [1 / 12] * 2 + [1 / 24] * 3, math.sqrt((7 / 6) / 6)),
    }
    for flag, (per_row, std) in cases.items():
        prepared = prepare(get_recipe("scalerl", zero_variance_filter=flag), batch)
        weights = batch.mask * torch.tensor(per_row, dtype=F64)[:, None]
        close(prepared.loss_weights, weights, rtol=1e-12, atol=0)
        close(prepared.advantages, x[:, None] / (std + EPS) * batch.mask, rtol=1e-12, atol=1e-15)
        assert prepared.keep.tolist() == [not flag] * 2 + [True] * 5


# ------------------------------------------------------------------ other objective pieces


def test_grpo_kl_term_in_loss_by_hand():
    # One response, Δ_ref = logπ − ref = (0.5, −1), on-policy, single-response group → Â = 0.
    # Loss = β·(1/1)(1/2)·(k3(0.5) + k3(−1)) = 0.04·½·((e^−0.5 − 0.5) + (e − 2)).
    batch = hand_batch([[0.0, 0.0]], [1], [0])
    batch.ref_logprobs = batch.logprobs - torch.tensor([[0.5, -1.0]], dtype=F64)
    recipe = get_recipe("grpo")
    loss, _ = loss_and_grad(recipe, batch, prepare(recipe, batch))
    expected = 0.04 * 0.5 * ((math.exp(-0.5) - 0.5) + (math.e - 2))
    assert math.isclose(loss, expected, rel_tol=1e-12)


def test_policy_loss_requires_ref_logprobs_for_kl_in_loss():
    batch = hand_batch([[0.0, 0.0]], [1], [0])
    recipe = get_recipe("grpo")
    prepared = prepare(recipe, batch)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(
            recipe,
            logprobs=batch.logprobs,
            old_logprobs=batch.old_logprobs,
            advantages=prepared.advantages,
            loss_weights=prepared.loss_weights,
            response_mask=prepared.response_mask,
        )


def test_overlong_filter_masks_truncated_responses():
    recipe = get_recipe("dapo", overlong_filter=True, overlong_penalty=False)
    batch = hand_batch([[0.0] * 8, [0.0] * 3, [0.0] * 2], [1, 0, 1], [0, 0, 0])
    prepared = prepare_batch(
        recipe,
        rewards=batch.rewards,
        correct=batch.correct,
        truncated=torch.tensor([True, False, False]),
        response_mask=batch.mask,
        group_ids=batch.group_ids,
        max_new_tokens=8,
    )
    assert torch.all(prepared.response_mask[0] == 0)
    assert torch.all(prepared.loss_weights[0] == 0)
    # token_mean over the 5 remaining tokens.
    close(prepared.loss_weights[1:], batch.mask[1:] / 5)
