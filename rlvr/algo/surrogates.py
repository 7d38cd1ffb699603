"""Per-token surrogate losses ℓ_{i,t} (docs/algorithms.md §3), to be *minimized*.

Each returns the loss (N, T) and the boolean masks of tokens whose ratio was clipped at the
lower and the upper bound, for the clip fractions. Bounds are given as ε: the ratio is
clipped to [1 − clip_low, 1 + clip_high]; clip_low = 1 means no lower bound.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class SurrogateOut(NamedTuple):
    loss: torch.Tensor  # (N, T)
    clipped_low: torch.Tensor  # (N, T) bool
    clipped_high: torch.Tensor  # (N, T) bool


def clip(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> SurrogateOut:
    """PPO (arXiv 1707.06347, Eq. 7): ℓ = −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)·Â).

    Decoupled ε_low/ε_high is DAPO's clip-higher (arXiv 2503.14476, Eq. 10). A token is
    "clipped" when the clipped branch is the active one, i.e. its gradient is zero.
    """
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(-ratio * advantages, -clipped_ratio * advantages)
    low = (advantages < 0) & (ratio < 1.0 - clip_low)
    high = (advantages > 0) & (ratio > 1.0 + clip_high)
    return SurrogateOut(loss, low, high)


def dual_clip(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip_c: float = 3.0,
) -> SurrogateOut:
    """Dual-clip PPO (Ye 2020, arXiv 1912.09729, Eq. 6): for Â < 0, ℓ = min(ℓ_clip, −c·Â).

    Bounds the loss (and zeroes the gradient) when ρ ≫ 1 on a negative-advantage token.
    """
    base = clip(ratio, advantages, logprobs, clip_low, clip_high)
    bounded = torch.minimum(base.loss, -dual_clip_c * advantages)
    loss = torch.where(advantages < 0, bounded, base.loss)
    high = base.clipped_high | ((advantages < 0) & (ratio > dual_clip_c))
    return SurrogateOut(loss, base.clipped_low, high)


def cispo(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> SurrogateOut:
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1): ℓ = −sg(clip(ρ, 1−ε_low, 1+ε_high))·Â·logπ.

    The importance weight is clipped, never the gradient: every token keeps ∂ℓ/∂logπ =
    −w·Â. The `minpro` recipe applies it to the prefix-minimum ratio; that pairing is
    rlvr's choice, not a form the MinPRO paper is known to use (docs/methods.md).
    """
    weight = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = -weight * advantages * logprobs
    low = ratio.detach() < 1.0 - clip_low
    high = ratio.detach() > 1.0 + clip_high
    return SurrogateOut(loss, low, high)


def reinforce(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> SurrogateOut:
    """Importance-sampled REINFORCE (Williams 1992): ℓ = −sg(ρ)·Â·logπ; no clipping.

    On-policy (ρ = 1) this is the plain policy gradient −Â·logπ.
    """
    loss = -ratio.detach() * advantages * logprobs
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return SurrogateOut(loss, never, never)


SURROGATES = {"clip": clip, "dual_clip": dual_clip, "cispo": cispo, "reinforce": reinforce}
