"""Adaptive entropy control (He 2025, Skywork-OR1, arXiv 2505.22312, §3.2.2), in the form
TRL implements (`use_adaptive_entropy` in `GRPOTrainer._compute_loss`).

The state is two numbers that must survive a checkpoint: the coefficient c_k and the
entropy H_{k−1} measured at the previous optimizer step. Step k applies c_k only if
H_{k−1} ≤ H_target (0 otherwise); after the step, with H_k its mean per-token entropy over
the step's policy tokens, c_{k+1} = min(c_k + δ, c_max) if H_k ≤ H_target, else
max(c_k − δ, c_min). Pure: the training loop owns the state (docs/algorithms.md §5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


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
