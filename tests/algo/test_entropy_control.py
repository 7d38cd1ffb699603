"""Adaptive entropy's recipe fields (issue 29): checked by name, turned into the controller,
its state saved and restored, and its c_k reaching the loss in place of entropy_coef."""

from __future__ import annotations

import math
import re

import pytest
import torch
from algo_testlib import F64, mask_of

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.entropy_control import AdaptiveEntropy, adaptive_entropy


def test_recipe_fields_build_the_controller():
    recipe = get_recipe(
        "grpo",
        entropy_coef=0.02,
        entropy_target=0.3,
        entropy_coef_delta=0.01,
        entropy_coef_min=0.01,
        entropy_coef_max=0.1,
    )
    assert adaptive_entropy(recipe) == AdaptiveEntropy(0.02, 0.3, 0.01, 0.01, 0.1, math.inf)
    assert adaptive_entropy(get_recipe("grpo", entropy_coef=0.02)) is None


def test_state_round_trips_and_keeps_the_settings():
    control = adaptive_entropy(get_recipe("grpo", entropy_coef=0.02, entropy_target=0.3))
    # 0.25 ≤ 0.3: c rises by TRL's default δ = 0.005; the bonus acts next step.
    moved = control.update(0.25)
    assert moved.state_dict() == {"coef": 0.025, "last_entropy": 0.25}
    restored = control.with_state(moved.state_dict())
    assert restored == moved and restored.applied_coef() == 0.025


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"entropy_coef_delta": 0.01}, "entropy_coef_delta=0.01 steer the adaptive entropy"),
        ({"entropy_coef_max": 0.5}, "(entropy_target=None); set entropy_target"),
        ({"entropy_target": -0.1}, "entropy_target must be ≥ 0 or None, got -0.1"),
        ({"entropy_target": 0.2, "entropy_coef_delta": -1.0}, "entropy_coef_delta must be ≥ 0"),
        (
            {"entropy_target": 0.2, "entropy_coef_min": 0.5, "entropy_coef_max": 0.1},
            "entropy_coef_max must be ≥ entropy_coef_min, got 0.1",
        ),
        (
            {"entropy_target": 0.2, "entropy_coef": 2.0},
            "entropy_coef=2.0 is the adaptive coefficient's start and must lie in "
            "[entropy_coef_min, entropy_coef_max] = [0.0, 1.0]",
        ),
        ({"entropy_target": 0.2, "entropy_coef_max": 0.0}, "entropy_coef_max=0 can never"),
    ],
)
def test_settings_that_cannot_take_effect_are_refused(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_recipe("grpo", **overrides)


def test_the_given_coefficient_replaces_the_recipes():
    # L(c) = L_policy − c·Σ w·H: passing c = 0.3 to a recipe whose entropy_coef is 0.1
    # equals the recipe with entropy_coef 0.3, and c = 0 drops the term.
    mask = mask_of([3, 2]).to(F64)
    gen = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(2, 3, generator=gen, dtype=F64)
    entropy = torch.rand(2, 3, generator=gen, dtype=F64)
    advantages = torch.tensor([[1.0], [-1.0]], dtype=F64) * mask
    weights = mask / mask.sum()

    def loss(recipe, **coef):
        value, stats = policy_loss(
            recipe,
            logprobs=logprobs,
            old_logprobs=logprobs,
            advantages=advantages,
            loss_weights=weights,
            response_mask=mask,
            entropy=entropy,
            **coef,
        )
        return value, stats.sums

    base = get_recipe("dapo", entropy_coef=0.1, entropy_target=0.2)
    given, _ = loss(base, entropy_coef=0.3)
    assert given == loss(get_recipe("dapo", entropy_coef=0.3))[0]
    off, sums = loss(base, entropy_coef=0.0)
    assert "loss/entropy" not in sums
    # Σ w·H over 5 tokens with w = 1/5: the bonus moved the loss by exactly 0.3·mean(H).
    mean_entropy = float((entropy * mask).sum() / 5)
    assert float(off - given) == pytest.approx(0.3 * mean_entropy, abs=1e-15)
