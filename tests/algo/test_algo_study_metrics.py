"""The metrics the replication studies read: gradient tokens, ratio spread, lengths by
outcome. Hand-worked values."""

import math

import torch

from rlvr.algo import policy_loss
from rlvr.algo.loss import gradient_tokens
from rlvr.algo.recipes import get_recipe
from rlvr.train.records.step_metrics import length_by_outcome

F64 = torch.float64
# Three tokens of one response; logπ = 0 everywhere, so ρ_t = exp(−logπ_old,t):
# ρ = [1.5, 1.0, 0.5] and Â = [+1, +1, −1]. With ε = 0.2 (grpo's default):
# token 0: Â > 0 and ρ = 1.5 > 1.2 → clipped high, zero gradient;
# token 1: ρ = 1 inside → gradient;
# token 2: Â < 0 and ρ = 0.5 < 0.8 → clipped low, zero gradient.
LOGPROBS = torch.zeros(1, 3, dtype=F64)
OLD = -torch.log(torch.tensor([[1.5, 1.0, 0.5]], dtype=F64))
ADV = torch.tensor([[1.0, 1.0, -1.0]], dtype=F64)
MASK = torch.ones(1, 3, dtype=F64)
WEIGHTS = MASK / 3


def _args():
    return dict(
        logprobs=LOGPROBS,
        old_logprobs=OLD,
        advantages=ADV,
        loss_weights=WEIGHTS,
        response_mask=MASK,
        ref_logprobs=LOGPROBS,  # grpo's KL term needs one; it does not enter the metrics
    )


def test_clipped_tokens_have_no_gradient_under_ppo_clip():
    recipe = get_recipe("grpo")
    assert (recipe.params.clip_low, recipe.params.clip_high) == (0.2, 0.2)
    moving = gradient_tokens(recipe, LOGPROBS, OLD, ADV, WEIGHTS, MASK)
    assert moving.tolist() == [[False, True, False]]
    _, stats = policy_loss(recipe, **_args())
    out = stats.finalize()
    assert out["grad/token_frac"] == 1 / 3
    assert out["grad/active_token_frac"] == 1 / 3
    assert out["clip/frac"] == 2 / 3


def test_cispo_keeps_a_gradient_on_every_token():
    recipe = get_recipe("cispo")
    moving = gradient_tokens(recipe, LOGPROBS, OLD, ADV, WEIGHTS, MASK)
    assert moving.tolist() == [[True, True, True]]
    _, stats = policy_loss(recipe, **_args())
    assert stats.finalize()["grad/token_frac"] == 1.0


def test_zero_advantage_and_padding_tokens_do_not_move():
    # Second token has Â = 0; third is padding (mask 0, weight 0).
    recipe = get_recipe("cispo")
    adv = torch.tensor([[1.0, 0.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)
    moving = gradient_tokens(recipe, LOGPROBS, OLD, adv, mask / 2, mask)
    assert moving.tolist() == [[True, False, False]]
    _, stats = policy_loss(
        recipe,
        logprobs=LOGPROBS,
        old_logprobs=OLD,
        advantages=adv,
        loss_weights=mask / 2,
        response_mask=mask,
    )
    out = stats.finalize()
    assert out["grad/token_frac"] == 1 / 2  # 1 of 2 response tokens
    assert out["grad/active_token_frac"] == 1.0  # 1 of 1 token with Â ≠ 0


def test_ratio_abs_dev_is_mean_distance_from_one():
    # |1.5 − 1| + |1 − 1| + |0.5 − 1| = 1.0 over 3 tokens.
    _, stats = policy_loss(get_recipe("grpo"), **_args())
    assert math.isclose(stats.finalize()["clip/ratio_abs_dev"], 1 / 3)


def test_length_by_outcome():
    lengths = torch.tensor([10.0, 20.0, 30.0, 50.0])
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0])
    # correct: (10 + 30) / 2 = 20; incorrect: (20 + 50) / 2 = 35.
    assert length_by_outcome(lengths, correct) == {
        "rollout/correct_length": 20.0,
        "rollout/incorrect_length": 35.0,
    }
    assert length_by_outcome(lengths, torch.ones(4)) == {"rollout/correct_length": 27.5}
