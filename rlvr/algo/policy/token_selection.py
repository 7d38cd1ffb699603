"""Token selection by entropy: the "80/20" rule (Wang 2025, "Beyond the 80/20 Rule:
High-Entropy Minority Tokens Drive Effective Reinforcement Learning for LLM Reasoning",
arXiv 2506.01939, §4; docs/algorithms.md §5)."""

from __future__ import annotations

import torch


def top_entropy_mask(
    entropy: torch.Tensor, response_mask: torch.Tensor, quantile: float
) -> torch.Tensor:
    """(N, T) bool: the valid tokens whose entropy H_t ≥ the (1 − ρ)-quantile of H over
    the valid tokens given, ρ = `quantile` (the paper keeps the top 20 %: ρ = 0.2).

    Only these tokens keep a policy gradient. As TRL's `get_high_entropy_mask`
    (`top_entropy_quantile`): ties at the threshold are kept (so ρ = 0 keeps the highest
    token(s)), torch.quantile's linear interpolation, and the quantile is over the tokens
    of the micro-batch it is given (TRL gathers ranks, not micro-batches). No gradient.
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in [0, 1], got {quantile!r}")
    valid = response_mask > 0
    entropy = entropy.detach()
    if not valid.any():
        return valid
    threshold = torch.quantile(entropy[valid], 1.0 - quantile)
    return (entropy >= threshold) & valid
