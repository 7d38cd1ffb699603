"""Which tokens a loss trains on: the one rule for inserted tokens (docs/algorithms.md §9)."""

from __future__ import annotations

import torch


def policy_mask(response_mask: torch.Tensor, forced_mask: torch.Tensor | None) -> torch.Tensor:
    """(N, T) the tokens the policy sampled: m_t · (1 − f_t), with f_t = 1 on tokens inserted
    instead of sampled (an episode's observations, an interruption phrase). Every loss,
    normaliser, ratio, KL and entropy counts these; inserted tokens stay in the context
    (`response_mask`) and in the trajectory's length."""
    if forced_mask is None:
        return response_mask
    return response_mask * (1.0 - forced_mask)
