"""Loss aggregation as per-token weights computed once from *global* counts (docs/algorithms.md §4).

Every mode is linear in the per-token loss: L = Σ_{i,t} w_{i,t} ℓ_{i,t}. The weights are
computed once per optimizer step over the whole rollout batch (all micro-batches, all ranks)
and travel with their rows, so any split of rows into micro-batches or ranks sums to the
same loss and the same gradient. A sequence-level loss ℓ_i broadcast over its tokens under
`seq_mean_token_mean` contributes exactly (1/N_seq)·ℓ_i.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages.groups import group_sum
from rlvr.algo.registry import AGGREGATIONS, register_aggregation


def aggregation_weights(
    mode: str,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    max_new_tokens: int | None = None,
) -> torch.Tensor:
    """Weights w (N, T) of the whole batch for one registered aggregation mode; 0 on padding.

    Each mode gives a per-response weight from global counts; w_{i,t} = that weight·m_{i,t}.
    N_seq counts responses and P prompt groups over the whole batch; a response whose mask
    is all zero (filtered, e.g. overlong) has left the batch and is not counted.
    """
    mask = response_mask.to(torch.float64)
    per_seq = AGGREGATIONS.get(mode).fn(mask, group_ids, max_new_tokens)  # (N,)
    return (per_seq[:, None] * mask).to(response_mask.dtype)


def _num_seq(lengths: torch.Tensor) -> int:
    return max(int((lengths > 0).sum()), 1)


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(mask: torch.Tensor, group_ids: torch.Tensor, max_new_tokens=None):
    """GRPO (arXiv 2402.03300, Eq. 3): w_i = (1/N_seq)·(1/|y_i|)."""
    lengths = mask.sum(-1)
    return 1.0 / (_num_seq(lengths) * lengths.clamp(min=1))


@register_aggregation("token_mean")
def token_mean(mask: torch.Tensor, group_ids: torch.Tensor, max_new_tokens=None):
    """DAPO (arXiv 2503.14476, Eq. 12): w_i = 1/Σ_{i,t} m_{i,t}."""
    lengths = mask.sum(-1)
    return torch.full_like(lengths, 1.0 / max(float(lengths.sum()), 1.0))


@register_aggregation("seq_mean_token_sum")
def seq_mean_token_sum(mask: torch.Tensor, group_ids: torch.Tensor, max_new_tokens=None):
    """w_i = 1/N_seq: each response's token sum, averaged over responses."""
    lengths = mask.sum(-1)
    return torch.full_like(lengths, 1.0 / _num_seq(lengths))


@register_aggregation("constant")
def constant(mask: torch.Tensor, group_ids: torch.Tensor, max_new_tokens=None):
    """Dr. GRPO (arXiv 2503.20783): w_i = 1/(N_seq·L_budget), L_budget = max new tokens."""
    if not max_new_tokens or max_new_tokens <= 0:
        raise ValueError("aggregation 'constant' needs max_new_tokens > 0 (the budget L)")
    lengths = mask.sum(-1)
    return torch.full_like(lengths, 1.0 / (_num_seq(lengths) * max_new_tokens))


@register_aggregation("prompt_mean")
def prompt_mean(mask: torch.Tensor, group_ids: torch.Tensor, max_new_tokens=None):
    """ScaleRL (arXiv 2510.13786, §3.2): w_i = (1/P)·1/Σ_{j∈g(i)} |y_j|."""
    lengths = mask.sum(-1)
    num_prompts = int(torch.unique(group_ids[lengths > 0]).numel())
    group_tokens = group_sum(lengths, group_ids)
    return 1.0 / (max(num_prompts, 1) * group_tokens.clamp(min=1))


def aggregate(per_token: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """L = Σ_{i,t} w_{i,t} ℓ_{i,t}: the micro-batch's share of the global loss."""
    return (per_token * weights).sum()
