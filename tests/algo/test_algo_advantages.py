"""Advantage estimators (docs/algorithms.md §1), hand-worked; arithmetic in the comments."""

import math

import pytest
import torch
from algo_testlib import F64, mask_of, padded
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algo import get_recipe, prepare_batch
from rlvr.algo.advantages.estimators import EPS, batch_norm, group_mean_baseline, group_norm, rloo
from rlvr.algo.advantages.gae import gae, length_adaptive_lambda, vapo_gae
from rlvr.algo.advantages.token_advantages import reinforce_pp, reinforce_pp_baseline

close = torch.testing.assert_close


def t(values):
    return torch.tensor(values, dtype=F64)


# ---------------------------------------------------------------- group_norm


def test_group_norm_hand_values_and_unbiased_std():
    # Group 7: r = (1, 0, 0): mean 1/3, deviations (2/3, −1/3, −1/3),
    #   unbiased var = (4/9 + 1/9 + 1/9) / (3 − 1) = 1/3, std = √(1/3).
    # Group 2: r = (2, 2): std 0 → Â = 0 exactly.   Group 9: one response → Â = 0 exactly.
    # Ids are not contiguous and not sorted.
    rewards = t([1.0, 2.0, 0.0, 5.0, 0.0, 2.0])
    group_ids = torch.tensor([7, 2, 7, 9, 7, 2])
    std = math.sqrt(1 / 3)
    expected = t(
        [(2 / 3) / (std + EPS), 0.0, (-1 / 3) / (std + EPS), 0.0, (-1 / 3) / (std + EPS), 0.0]
    )
    adv = group_norm(rewards, group_ids)
    close(adv, expected, rtol=1e-12, atol=0)
    assert adv[1] == 0 and adv[3] == 0 and adv[5] == 0


def test_group_norm_uses_unbiased_std():
    # r = (1, 0): mean 0.5; unbiased std = √((0.25 + 0.25)/1) = √0.5 (biased would be 0.5 → Â = ±1).
    adv = group_norm(t([1.0, 0.0]), torch.tensor([0, 0]))
    close(adv, t([0.5, -0.5]) / (math.sqrt(0.5) + EPS), rtol=1e-12, atol=0)
    assert abs(float(adv[0]) - 1.0) > 0.2


def test_group_norm_constant_group_with_float_residue_is_exactly_zero():
    # mean(0.1, 0.1, 0.1) in floating point is not exactly 0.1; ε-division must not amplify it.
    adv = group_norm(t([0.1, 0.1, 0.1]), torch.tensor([0, 0, 0]))
    assert torch.equal(adv, torch.zeros(3, dtype=F64))


# ---------------------------------------------------------------- group_mean (Dr. GRPO)


def test_group_mean_hand_values():
    # Group 0: r = (1, 0, 0), mean 1/3 → (2/3, −1/3, −1/3), no std division.
    # Group 1: r = (0.5, 0.5) → 0.  Group 2: (3, 1) mean 2 → (1, −1).
    rewards = t([1.0, 0.0, 0.0, 0.5, 0.5, 3.0, 1.0])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    expected = t([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 1.0, -1.0])
    close(group_mean_baseline(rewards, group_ids), expected, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------- rloo


def test_rloo_hand_values():
    # Group 0: r = (3, 1, 2, 6): Â_0 = 3 − (1+2+6)/3 = 0;  Â_1 = 1 − 11/3 = −8/3;
    #   Â_2 = 2 − 10/3 = −4/3;  Â_3 = 6 − 6/3 = 4.
    #   Identity: G/(G−1)·(r − mean) = 4/3·(0, −2, −1, 3) = (0, −8/3, −4/3, 4).  ✓
    # Group 1: r = (1, 0, 0): Â = (1 − 0, 0 − 1/2, 0 − 1/2) = (1, −0.5, −0.5).
    # Group 2: a single response has no leave-one-out baseline → 0.
    rewards = t([3.0, 1.0, 2.0, 6.0, 1.0, 0.0, 0.0, 4.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2])
    expected = t([0.0, -8 / 3, -4 / 3, 4.0, 1.0, -0.5, -0.5, 0.0])
    close(rloo(rewards, group_ids), expected, rtol=1e-12, atol=1e-14)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=6), min_size=1, max_size=4))
def test_rloo_leave_one_out_identity(groups):
    # Â_i = r_i − mean_{j≠i} r_j  ==  G/(G−1)·(r_i − mean_g r), checked by an explicit loop.
    rewards = t([r for g in groups for r in g])
    group_ids = torch.tensor([k for k, g in enumerate(groups) for _ in g])
    expected = []
    for g in groups:
        for i, r in enumerate(g):
            others = g[:i] + g[i + 1 :]
            expected.append(r - sum(others) / len(others))
    close(rloo(rewards, group_ids), t(expected), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- batch_norm (ScaleRL)


def test_batch_norm_hand_values():
    # x = r − mean_g r:  g0 (1, 0) → (0.5, −0.5);  g1 (1, 1) → (0, 0);
    #   g2 (0, 0, 1, 1) → (−0.5, −0.5, 0.5, 0.5).
    # Over all 8 responses: mean 0, Σx² = 0.25·6 = 1.5, unbiased var = 1.5/7 (zero-variance
    # group included), std = √(1.5/7).
    rewards = t([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    group_ids = torch.tensor([0, 0, 1, 1, 2, 2, 2, 2])
    x = t([0.5, -0.5, 0.0, 0.0, -0.5, -0.5, 0.5, 0.5])
    close(batch_norm(rewards, group_ids), x / (math.sqrt(1.5 / 7) + EPS), rtol=1e-12, atol=0)


def test_batch_norm_all_constant_is_zero():
    adv = batch_norm(t([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert torch.equal(adv, torch.zeros(4, dtype=F64))


# ---------------------------------------------------------------- REINFORCE++


def test_reinforce_pp_kl_in_reward_hand_values():
    # r = (1, 0), lengths (3, 2), k = [[0.1, 0.2, 0.3], [0.4, 0.5, pad]], β = 0.5.
    # R_{i,t} = r_i − β Σ_{s≥t} k_{i,s}:
    #   row 0: 1 − 0.5·0.6 = 0.70, 1 − 0.5·0.5 = 0.75, 1 − 0.5·0.3 = 0.85
    #   row 1: 0 − 0.5·0.9 = −0.45, 0 − 0.5·0.5 = −0.25
    # Whiten over the 5 valid tokens: mean = 1.6/5 = 0.32; deviations
    #   (0.38, 0.43, 0.53, −0.77, −0.57); Σdev² = 0.1444+0.1849+0.2809+0.5929+0.3249 = 1.528;
    #   unbiased std = √(1.528/4).
    mask = mask_of([3, 2])
    kl = padded([[0.1, 0.2, 0.3], [0.4, 0.5]], pad=9.0)
    std = math.sqrt(1.528 / 4)
    expected = t([[0.38, 0.43, 0.53], [-0.77, -0.57, 0.0]]) / (std + EPS)
    expected[1, 2] = 0.0
    adv = reinforce_pp(t([1.0, 0.0]), mask, kl, kl_coef=0.5)
    close(adv, expected, rtol=1e-10, atol=1e-12)


def test_reinforce_pp_recipe_takes_kl_from_old_vs_ref():
    # Same example through prepare_batch: k1 = logπ_old − logπ_ref is the k above.
    mask = mask_of([3, 2])
    ref = padded([[-1.0, -1.0, -1.0], [-1.0, -1.0]], pad=-1.0)
    old = ref + padded([[0.1, 0.2, 0.3], [0.4, 0.5]], pad=9.0)
    prepared = prepare_batch(
        get_recipe("reinforce_pp", kl_coef=0.5),
        rewards=t([1.0, 0.0]),
        correct=t([1.0, 0.0]),
        truncated=torch.tensor([False, False]),
        response_mask=mask,
        group_ids=torch.tensor([0, 0]),
        max_new_tokens=4,
        old_logprobs=old,
        ref_logprobs=ref,
    )
    std = math.sqrt(1.528 / 4)
    expected = t([[0.38, 0.43, 0.53], [-0.77, -0.57, 0.0]]) / (std + EPS)
    expected[1, 2] = 0.0
    close(prepared.advantages, expected, rtol=1e-10, atol=1e-12)


def test_reinforce_pp_baseline_hand_values():
    # x = r − mean_g r: g0 r = (1, 0) → (0.5, −0.5), lengths (2, 1); g1 r = (1, 1) → 0, lengths (1, 2).
    # Tokens: (0.5, 0.5), (−0.5), (0), (0, 0): 6 tokens, sum 0.5, mean 1/12.
    # deviations: 5/12, 5/12, −7/12, −1/12, −1/12, −1/12; Σdev² = (25+25+49+1+1+1)/144 = 102/144;
    # unbiased std = √(102/144/5).
    mask = mask_of([2, 1, 1, 2])
    std = math.sqrt(102 / 144 / 5)
    expected = t([[5, 5], [-7, 0], [-1, 0], [-1, -1]]) / 12 / (std + EPS)
    adv = reinforce_pp_baseline(t([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), mask)
    close(adv, expected, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- GAE


def _four_token_case(pad: int = 0):
    # Reward 1 on the last of 4 tokens; V = (0.5, 0.6, 0.7, 0.8); `pad` garbage columns.
    rewards = t([[0.0, 0.0, 0.0, 1.0] + [5.0] * pad])
    values = t([[0.5, 0.6, 0.7, 0.8] + [9.0] * pad])
    mask = mask_of([4], 4 + pad)
    return rewards, values, mask


@pytest.mark.parametrize("pad", [0, 2])
def test_gae_gamma1_lambda095_hand_values(pad):
    # γ = 1, λ = 0.95. V after the last token is 0.
    # δ_3 = 1 + 0 − 0.8 = 0.2;  δ_2 = 0 + 0.8 − 0.7 = 0.1;  δ_1 = 0.7 − 0.6 = 0.1;  δ_0 = 0.6 − 0.5 = 0.1
    # Â_3 = 0.2;  Â_2 = 0.1 + 0.95·0.2 = 0.29;  Â_1 = 0.1 + 0.95·0.29 = 0.3755;
    # Â_0 = 0.1 + 0.95·0.3755 = 0.456725.  Value targets Â + V = (0.956725, 0.9755, 0.99, 1.0).
    rewards, values, mask = _four_token_case(pad)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    zeros = [0.0] * pad
    close(adv, t([[0.456725, 0.3755, 0.29, 0.2, *zeros]]), rtol=1e-12, atol=1e-14)
    close(ret, t([[0.956725, 0.9755, 0.99, 1.0, *zeros]]), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("pad", [0, 2])
def test_gae_gamma09_lambda05_hand_values(pad):
    # γ = 0.9, λ = 0.5, γλ = 0.45.
    # δ_3 = 1 − 0.8 = 0.2;  δ_2 = 0.9·0.8 − 0.7 = 0.02;  δ_1 = 0.9·0.7 − 0.6 = 0.03;
    # δ_0 = 0.9·0.6 − 0.5 = 0.04.
    # Â_3 = 0.2;  Â_2 = 0.02 + 0.45·0.2 = 0.11;  Â_1 = 0.03 + 0.45·0.11 = 0.0795;
    # Â_0 = 0.04 + 0.45·0.0795 = 0.075775.  Targets Â + V = (0.575775, 0.6795, 0.81, 1.0).
    rewards, values, mask = _four_token_case(pad)
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    zeros = [0.0] * pad
    close(adv, t([[0.075775, 0.0795, 0.11, 0.2, *zeros]]), rtol=1e-12, atol=1e-14)
    close(ret, t([[0.575775, 0.6795, 0.81, 1.0, *zeros]]), rtol=1e-12, atol=1e-14)


def test_gae_ragged_batch_rows_are_independent():
    # Row 1 is the 4-token case; row 0 is a 2-token response with reward 1, V = (0.5, 0.5):
    #   γ = 1, λ = 0.95: δ_1 = 1 − 0.5 = 0.5, δ_0 = 0.5 − 0.5 = 0 → Â = (0.95·0.5, 0.5) = (0.475, 0.5).
    rewards = t([[0.0, 1.0, 7.0, 7.0], [0.0, 0.0, 0.0, 1.0]])
    values = t([[0.5, 0.5, 3.0, 3.0], [0.5, 0.6, 0.7, 0.8]])
    mask = mask_of([2, 4])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    close(adv[0], t([0.475, 0.5, 0.0, 0.0]), rtol=1e-12, atol=1e-14)
    close(ret[0], t([0.975, 1.0, 0.0, 0.0]), rtol=1e-12, atol=1e-14)
    close(adv[1], t([0.456725, 0.3755, 0.29, 0.2]), rtol=1e-12, atol=1e-14)


def test_ppo_recipe_value_targets_equal_advantage_plus_value():
    # Unwhitened here: the whitening has its own test (test_algo_gamma_whiten).
    recipe = get_recipe("ppo", kl_coef=0.0, kl=None, kl_in_reward=False, whiten_advantages=False)
    _, values, mask = _four_token_case(pad=1)
    prepared = prepare_batch(
        recipe,
        rewards=t([1.0]),
        correct=t([1.0]),
        truncated=torch.tensor([False]),
        response_mask=mask,
        group_ids=torch.tensor([0]),
        max_new_tokens=5,
        values=values,
    )
    close(prepared.advantages, t([[0.456725, 0.3755, 0.29, 0.2, 0.0]]), rtol=1e-12, atol=1e-14)
    close(prepared.returns, t([[0.956725, 0.9755, 0.99, 1.0, 0.0]]), rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- VAPO


def test_length_adaptive_lambda_values_and_clamp():
    # λ = 1 − 1/(α·|y|), α = 0.05: |y|=40 → 1 − 1/2 = 0.5; |y|=100 → 1 − 1/5 = 0.8;
    # |y|=20 → 1 − 1/1 = 0; |y|=10 → 1 − 2 = −1 → clamped to 0; |y|=4 → −4 → 0.
    lam = length_adaptive_lambda(torch.tensor([40, 100, 20, 10, 4]), alpha=0.05)
    close(lam, t([0.5, 0.8, 0.0, 0.0, 0.0]), rtol=1e-12, atol=1e-15)
    # α = 0.5: |y|=4 → 1 − 1/2 = 0.5.
    close(length_adaptive_lambda(torch.tensor([4]), alpha=0.5), t([0.5]), rtol=1e-12, atol=0)


def test_vapo_gae_long_response_uses_lambda_half_and_monte_carlo_targets():
    # |y| = 40, α = 0.05 → λ_policy = 0.5, γ = 1. With V ≡ 0 the only δ is δ_39 = r = 1, so
    #   Â_t = (γλ)^{39−t}·1 = 0.5^{39−t}.
    length = 40
    rewards = torch.zeros(1, length, dtype=F64)
    rewards[0, -1] = 1.0
    mask = torch.ones(1, length, dtype=F64)
    adv, ret = vapo_gae(rewards, torch.zeros(1, length, dtype=F64), mask)
    expected = t([[0.5 ** (length - 1 - k) for k in range(length)]])
    close(adv, expected, rtol=1e-12, atol=1e-15)
    # λ_critic = 1, γ = 1: the value target is the Monte-Carlo return, r = 1 on every token,
    # whatever the values are.
    values = torch.linspace(-1, 2, length, dtype=F64)[None]
    _, ret = vapo_gae(rewards, values, mask)
    close(ret, torch.ones(1, length, dtype=F64), rtol=1e-12, atol=1e-12)


def test_vapo_gae_short_response_is_td0():
    # |y| = 4 < 1/α = 20: λ_policy clamps to 0 → Â_t = δ_t = (0.1, 0.1, 0.1, 0.2)
    # (δ from the 4-token case above); targets are the MC return 1 everywhere.
    rewards, values, mask = _four_token_case(pad=2)
    adv, ret = vapo_gae(rewards, values, mask)
    close(adv, t([[0.1, 0.1, 0.1, 0.2, 0.0, 0.0]]), rtol=1e-12, atol=1e-14)
    close(ret, t([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]]), rtol=1e-12, atol=1e-14)


def test_outcome_reward_sits_on_the_last_valid_token_even_with_a_hole():
    """Forced interruption leaves a hole (the inserted phrase) in the loss mask: the reward
    belongs to the last sampled token, index 5 here, not to index mask.sum() − 1 = 3."""
    from rlvr.algo.advantages.token_advantages import outcome_token_rewards

    mask = torch.tensor([[1.0, 1, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.float64)
    rewards = outcome_token_rewards(torch.tensor([1.0, 2.0], dtype=torch.float64), mask, None, 0.0)
    assert rewards.tolist() == [[0, 0, 0, 0, 0, 1.0], [0, 0, 2.0, 0, 0, 0]]
