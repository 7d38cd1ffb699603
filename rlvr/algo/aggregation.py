"""Loss aggregation as per-token weights computed once from *global* counts (docs/algorithms.md §4).

Every mode is linear in the per-token loss: L = Σ_{i,t} w_{i,t} ℓ_{i,t}. The weights are
computed once per optimizer step over the whole rollout batch (all micro-batches, all ranks)
and travel with their rows, so any split of rows into micro-batches or ranks sums to the
same loss and the same gradient. A sequence-level loss ℓ_i broadcast over its tokens under
`seq_mean_token_mean` contributes exactly (1/N_seq)·ℓ_i.
"""

from __future__ import annotations

import torch

from rlvr.algo.groups import group_sum


def aggregation_weights(
    mode: str,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    max_new_tokens: int | None = None,
) -> torch.Tensor:
    """Weights w (N, T) of the whole batch for one aggregation mode; 0 on padding.

    - seq_mean_token_mean: (1/N_seq)·(1/|y_i|)               GRPO (arXiv 2402.03300, Eq. 3)
    - token_mean:          1/Σ_{i,t} m_{i,t}                   DAPO (arXiv 2503.14476, Eq. 12)
    - seq_mean_token_sum:  1/N_seq
    - constant:            1/(N_seq·L_budget), L_budget = max new tokens   Dr. GRPO (2503.20783)
    - prompt_mean:         (1/P)·1/Σ_{j∈g(i)} |y_j|            ScaleRL (arXiv 2510.13786, §3.2)
    N_seq counts responses and P prompt groups over the whole batch; a response whose mask
    is all zero (filtered, e.g. overlong) has left the batch and is not counted.
    """
    mask = response_mask.to(torch.float64)
    lengths = mask.sum(-1)  # (N,)
    present = lengths > 0
    num_seq = max(int(present.sum()), 1)
    if mode == "seq_mean_token_mean":
        per_seq = 1.0 / (num_seq * lengths.clamp(min=1))
    elif mode == "token_mean":
        per_seq = torch.full_like(lengths, 1.0 / max(float(lengths.sum()), 1.0))
    elif mode == "seq_mean_token_sum":
        per_seq = torch.full_like(lengths, 1.0 / num_seq)
    elif mode == "constant":
        if not max_new_tokens or max_new_tokens <= 0:
            raise ValueError("aggregation 'constant' needs max_new_tokens > 0 (the budget L)")
        per_seq = torch.full_like(lengths, 1.0 / (num_seq * max_new_tokens))
    elif mode == "prompt_mean":
        num_prompts = int(torch.unique(group_ids[present]).numel())
        group_tokens = group_sum(lengths, group_ids)
        per_seq = 1.0 / (max(num_prompts, 1) * group_tokens.clamp(min=1))
    else:
        raise ValueError(f"unknown aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")
    return (per_seq[:, None] * mask).to(response_mask.dtype)


def aggregate(per_token: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """L = Σ_{i,t} w_{i,t} ℓ_{i,t}: the micro-batch's share of the global loss."""
    return (per_token * weights).sum()


AGGREGATIONS = (
    "seq_mean_token_mean",
    "token_mean",
    "seq_mean_token_sum",
    "constant",
    "prompt_mean",
)
