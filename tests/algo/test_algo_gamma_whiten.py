"""The discount γ of REINFORCE++ returns and the whitening of GAE advantages (issue 9)."""

import math

import torch
from algo_testlib import F64, mask_of, padded

from rlvr.algo import get_recipe, prepare_batch
from rlvr.algo.advantages.token_advantages import reward_to_go
from rlvr.algo.advantages.whiten import masked_whiten


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-14)


def test_reward_to_go_discounts_with_gamma_half():
    # Token rewards row 0: (−0.1, −0.2, 0.7), γ = 0.5:
    #   R_2 = 0.7;  R_1 = −0.2 + 0.5·0.7 = 0.15;  R_0 = −0.1 + 0.5·0.15 = −0.025.
    # Row 1 (2 tokens, padded with a loud 9): (0, 1) → R = (0.5, 1).
    rewards = padded([[-0.1, -0.2, 0.7], [0.0, 1.0]], pad=9.0)
    returns = reward_to_go(rewards, mask_of([3, 2]), gamma=0.5)
    close(returns, torch.tensor([[-0.025, 0.15, 0.7], [0.5, 1.0, 0.0]], dtype=F64))


def test_reward_to_go_gamma_skips_masked_holes():
    # A hole (engine-inserted token) at t=1 is not a policy step: R_0 = 0 + 0.5·1 = 0.5.
    mask = torch.tensor([[1.0, 0.0, 1.0]], dtype=F64)
    returns = reward_to_go(torch.tensor([[0.0, 5.0, 1.0]], dtype=F64), mask, gamma=0.5)
    close(returns, torch.tensor([[0.5, 0.0, 1.0]], dtype=F64))


def test_reinforce_pp_recipe_honours_gamma():
    # r = (1, 0), lengths (3, 2), no KL, γ = 0.5: returns (0.25, 0.5, 1 | 0, 0), then whitened
    # over the 5 valid tokens. With γ ignored the returns would be (1, 1, 1 | 0, 0).
    mask = mask_of([3, 2])
    prepared = prepare_batch(
        get_recipe("reinforce_pp", kl=None, kl_coef=0.0, kl_in_reward=False, gamma=0.5),
        rewards=torch.tensor([1.0, 0.0], dtype=F64),
        correct=torch.tensor([1.0, 0.0], dtype=F64),
        truncated=torch.tensor([False, False]),
        response_mask=mask,
        group_ids=torch.tensor([0, 0]),
        max_new_tokens=4,
    )
    returns = torch.tensor([[0.25, 0.5, 1.0], [0.0, 0.0, 0.0]], dtype=F64)
    close(prepared.advantages, masked_whiten(returns, mask))


def _ppo_four_tokens(**overrides):
    # Reward 1 on the last of 4 tokens, V = (0.5, 0.6, 0.7, 0.8), γ = 1, λ = 0.95:
    # Â = (0.456725, 0.3755, 0.29, 0.2) and value targets Â + V = (0.956725, 0.9755, 0.99, 1.0)
    # (worked out in test_algo_advantages.test_gae_gamma1_lambda095_hand_values).
    recipe = get_recipe("ppo", kl_coef=0.0, kl=None, kl_in_reward=False, **overrides)
    return prepare_batch(
        recipe,
        rewards=torch.tensor([1.0], dtype=F64),
        correct=torch.tensor([1.0], dtype=F64),
        truncated=torch.tensor([False]),
        response_mask=mask_of([4], 5),
        group_ids=torch.tensor([0]),
        max_new_tokens=5,
        values=torch.tensor([[0.5, 0.6, 0.7, 0.8, 9.0]], dtype=F64),
    )


def test_ppo_whitens_gae_advantages_but_not_value_targets():
    # mean Â = 1.322225/4 = 0.33055625; deviations (0.12616875, 0.04494375, −0.04055625,
    # −0.13055625); Σdev² = 0.03662823796875; unbiased std = √(Σdev²/3) = 0.1104962110...
    prepared = _ppo_four_tokens()
    std = math.sqrt(0.03662823796875 / 3)
    deviations = [0.12616875, 0.04494375, -0.04055625, -0.13055625, 0.0]
    expected = torch.tensor(deviations, dtype=F64)[None] / (std + 1e-6)
    close(prepared.advantages, expected)
    close(prepared.returns, torch.tensor([[0.956725, 0.9755, 0.99, 1.0, 0.0]], dtype=F64))


def test_whitening_is_a_recipe_field_on_for_ppo_only():
    assert get_recipe("ppo").whiten_advantages
    assert not get_recipe("vapo").whiten_advantages and not get_recipe("grpo").whiten_advantages
    raw = _ppo_four_tokens(whiten_advantages=False)
    close(raw.advantages, torch.tensor([[0.456725, 0.3755, 0.29, 0.2, 0.0]], dtype=F64))
