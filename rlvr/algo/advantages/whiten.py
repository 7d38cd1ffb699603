"""Masked whitening over every valid token of the global rollout batch."""

from __future__ import annotations

import torch

EPS = 1e-6


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ m·x / Σ m over all elements (a scalar); 0 if the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """(x − mean) / (std + ε) over masked elements; std unbiased; masked-out entries become 0."""
    count = mask.sum()
    mean = masked_mean(x, mask)
    var = (((x - mean) ** 2) * mask).sum() / (count - 1).clamp(min=1)
    return (x - mean) / (var.sqrt() + eps) * mask
