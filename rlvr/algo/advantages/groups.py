"""Per-group reductions over a flat batch of responses identified by `group_ids`.

Groups need not be contiguous; ids need not start at 0. Every function is pure and
differentiable where that makes sense.
"""

from __future__ import annotations

import torch


def dense_ids(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to 0..P-1 (in order of first appearance is not needed)."""
    unique, dense = torch.unique(group_ids, return_inverse=True)
    return dense, int(unique.numel())


def group_sum(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Σ_{j∈g(i)} x_j broadcast back to every member i. x: (N,) → (N,)."""
    dense, num_groups = dense_ids(group_ids)
    sums = torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add(0, dense, x)
    return sums[dense]


def group_size(group_ids: torch.Tensor) -> torch.Tensor:
    """Number of members of each response's group, as float. (N,) → (N,)."""
    return group_sum(torch.ones_like(group_ids, dtype=torch.float64), group_ids)


def group_mean(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """mean_g x broadcast to members. (N,) → (N,)."""
    return group_sum(x, group_ids) / group_size(group_ids).to(x.dtype)


def group_std(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Unbiased (N−1) standard deviation of each group; 0 for groups of one. (N,) → (N,)."""
    centred = x - group_mean(x, group_ids)
    n = group_size(group_ids).to(x.dtype)
    var = group_sum(centred * centred, group_ids) / (n - 1).clamp(min=1)
    return var.sqrt()


def group_is_constant(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """True for members of groups whose values are all exactly equal. (N,) → (N,) bool.

    Exact comparison (max == min), not std < tol: floating-point means of equal values
    can leave a residue that ε-division would blow up into a spurious advantage.
    """
    dense, num_groups = dense_ids(group_ids)
    hi = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, dense, x.double(), "amax"
    )
    lo = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, dense, x.double(), "amin"
    )
    return (hi == lo)[dense]
