"""Adaptive entropy control (He 2025, Skywork-OR1, arXiv 2505.22312, §3.2.2), in the form
TRL implements (`use_adaptive_entropy` in `GRPOTrainer._compute_loss`).

The state is two numbers that must survive a checkpoint: the coefficient c_k and the
entropy H_{k−1} measured at the previous optimizer step. Step k applies c_k only if
H_{k−1} ≤ H_target (0 otherwise); after the step, with H_k its mean per-token entropy over
the step's policy tokens, c_{k+1} = min(c_k + δ, c_max) if H_k ≤ H_target, else
max(c_k − δ, c_min). Pure: the training loop owns the state, passes c_k's applied value
to the loss, updates it from the step's logged `policy/entropy` (over every rank) and
saves it in checkpoints (docs/algorithms.md §5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.algo.recipes import Recipe


@dataclass(frozen=True)
class AdaptiveEntropy:
    """The controller's settings and state; `coef` starts at the recipe's entropy_coef."""

    coef: float
    target: float = 0.2
    delta: float = 0.005
    coef_min: float = 0.0
    coef_max: float = 1.0
    last_entropy: float = math.inf  # no step measured yet: the bonus is off at step 1

    def __post_init__(self) -> None:
        if not self.coef_min <= self.coef <= self.coef_max:
            raise ValueError(
                f"entropy coef={self.coef!r} must lie in [coef_min, coef_max] = "
                f"[{self.coef_min!r}, {self.coef_max!r}]"
            )
        if self.delta < 0 or self.target < 0:
            raise ValueError(
                f"adaptive entropy needs delta ≥ 0 and target ≥ 0, got delta={self.delta!r}, "
                f"target={self.target!r}"
            )

    def applied_coef(self) -> float:
        """c_k if H_{k−1} ≤ H_target, else 0: the coefficient this step's loss uses."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def update(self, entropy: float) -> AdaptiveEntropy:
        """The state after a step whose mean per-token entropy was `entropy` (H_k)."""
        if entropy <= self.target:
            coef = min(self.coef + self.delta, self.coef_max)
        else:
            coef = max(self.coef - self.delta, self.coef_min)
        return replace(self, coef=coef, last_entropy=entropy)

    def state_dict(self) -> dict[str, float]:
        """The state a checkpoint carries (the settings are the recipe's)."""
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def with_state(self, state: dict[str, float]) -> AdaptiveEntropy:
        """These settings with the saved state (`state_dict()`) restored."""
        return replace(self, coef=float(state["coef"]), last_entropy=float(state["last_entropy"]))


def adaptive_entropy(recipe: Recipe) -> AdaptiveEntropy | None:
    """The controller at step 1 for a recipe with `entropy_target`; None for a static c_H."""
    if recipe.entropy_target is None:
        return None
    return AdaptiveEntropy(
        coef=recipe.entropy_coef,
        target=recipe.entropy_target,
        delta=recipe.entropy_coef_delta,
        coef_min=recipe.entropy_coef_min,
        coef_max=recipe.entropy_coef_max,
    )
