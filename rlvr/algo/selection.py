"""Batch-level sample selection and reward shaping (docs/algorithms.md §6), as pure functions."""

from __future__ import annotations

import torch

from rlvr.algo.advantages.groups import group_is_constant
from rlvr.algo.registry import register_selection
from rlvr.algo.regularizers import soft_overlong_penalty


def informative_groups(correct: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling (arXiv 2503.14476, Eq. 11): keep a group only if 0 < #correct < G.

    Decided on *raw correctness* (or, keyed on reward, on the reward before shaping), never
    on the shaped reward. (N,) → (N,) bool.
    """
    return ~group_is_constant(correct.to(torch.float64), group_ids)


SAMPLING_KEYS = ("correct", "reward")
"""What dynamic sampling keys on: the verifier's raw correctness (DAPO), or the reward the
advantages are computed from, before length shaping (for a run whose signal is a user's
reward function, where correctness may never vary)."""


def sampling_signal(key: str, correct: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """The (N,) values whose uniformity within a group drops it under dynamic sampling."""
    if key not in SAMPLING_KEYS:
        raise ValueError(f"dynamic_sampling_key must be one of {SAMPLING_KEYS}, got {key!r}")
    return correct if key == "correct" else rewards


@register_selection("dynamic_sampling")
def _dynamic_sampling(correct: torch.Tensor, rewards: torch.Tensor, group_ids: torch.Tensor):
    """`correct`: what `sampling_signal` chose (raw correctness unless keyed on reward)."""
    return informative_groups(correct, group_ids)


def nonzero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """ScaleRL zero-variance filtering (arXiv 2510.13786, §3.2): keep groups whose rewards differ."""
    return ~group_is_constant(rewards, group_ids)


@register_selection("zero_variance_filter")
def _zero_variance_filter(correct: torch.Tensor, rewards: torch.Tensor, group_ids: torch.Tensor):
    return nonzero_variance_groups(rewards, group_ids)


def shaped_rewards(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    max_new_tokens: int,
    overlong_cache: int | None,
) -> torch.Tensor:
    """r = correctness reward + R_len(|y|) (DAPO Eq. 13) when a cache is given, else r."""
    if overlong_cache is None:
        return rewards
    penalty = soft_overlong_penalty(lengths, max_new_tokens, overlong_cache)
    return rewards + penalty.to(rewards.dtype)
