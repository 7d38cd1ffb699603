"""Outcome-reward advantage estimators (docs/algorithms.md §1), one Â per response.

Each takes scalar rewards r (N,) and group ids (N,) for the *whole* rollout batch and
returns Â (N,); `per_response` makes each the registered estimator that broadcasts Â over
the response's tokens. Token-level estimators (REINFORCE++, GAE) live in
`token_advantages.py` and `gae.py`. All run without gradient.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages.groups import group_is_constant, group_mean, group_size, group_std
from rlvr.algo.registry import per_response, register_advantage

EPS = 1e-6


def group_norm(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """GRPO (Shao 2024, arXiv 2402.03300, §4.1.2): Â_i = (r_i − mean_g r) / (std_g r + ε).

    std is unbiased (N−1). A group whose rewards are all equal gets Â = 0 exactly.
    """
    centred = rewards - group_mean(rewards, group_ids)
    adv = centred / (group_std(rewards, group_ids) + eps)
    return torch.where(group_is_constant(rewards, group_ids), torch.zeros_like(adv), adv)


def group_mean_baseline(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (Liu 2025, arXiv 2503.20783, Eq. 3): Â_i = r_i − mean_g r, no std division."""
    centred = rewards - group_mean(rewards, group_ids)
    return torch.where(group_is_constant(rewards, group_ids), torch.zeros_like(centred), centred)


def rloo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO (Ahmadian 2024, arXiv 2402.14740, Eq. 6): Â_i = r_i − (1/(G−1)) Σ_{j≠i} r_j.

    Equal to G/(G−1)·(r_i − mean_g r); a group of one has no baseline and gets Â = 0.
    """
    n = group_size(group_ids).to(rewards.dtype)
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))
    return scale * group_mean_baseline(rewards, group_ids)


def batch_norm(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """ScaleRL (Khatri 2025, arXiv 2510.13786, §3.2): x_i = r_i − mean_g r; Â_i = x_i / (std_batch x + ε).

    The std is unbiased over every response of the batch it is given. Zero-variance groups
    in that batch count (with x = 0); the `scalerl` recipe filters them out first
    (zero-variance filtering), so there the std is over the informative groups only.
    """
    centred = group_mean_baseline(rewards, group_ids)
    if centred.numel() < 2:
        return torch.zeros_like(centred)
    std = centred.std(unbiased=True)
    return centred / (std + eps)


register_advantage("group_norm", group_baseline=True)(per_response(group_norm))
register_advantage("group_mean", group_baseline=True)(per_response(group_mean_baseline))
register_advantage("rloo", group_baseline=True)(per_response(rloo))
register_advantage("batch_norm", group_baseline=True)(per_response(batch_norm))
