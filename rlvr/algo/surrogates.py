"""Per-token surrogate losses ℓ_{i,t} (docs/algorithms.md §3), to be *minimized*.

Each takes (ratio, advantages, logprobs, params) and returns the loss (N, T) and the boolean
masks of tokens whose ratio was clipped at the lower and the upper bound, for the clip
fractions. Bounds are given as ε in `params`: the ratio is clipped to
[1 − clip_low, 1 + clip_high]; clip_low = 1 means no lower bound.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlvr.algo.registry import Params, register_surrogate


class SurrogateOut(NamedTuple):
    loss: torch.Tensor  # (N, T)
    clipped_low: torch.Tensor  # (N, T) bool
    clipped_high: torch.Tensor  # (N, T) bool


@register_surrogate("clip")
def clip(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
) -> SurrogateOut:
    """PPO (arXiv 1707.06347, Eq. 7): ℓ = −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)·Â).

    Decoupled ε_low/ε_high is DAPO's clip-higher (arXiv 2503.14476, Eq. 10). A token is
    "clipped" when the clipped branch is the active one, i.e. its gradient is zero.
    """
    low_bound, high_bound = 1.0 - params.clip_low, 1.0 + params.clip_high
    clipped_ratio = ratio.clamp(low_bound, high_bound)
    loss = torch.maximum(-ratio * advantages, -clipped_ratio * advantages)
    low = (advantages < 0) & (ratio < low_bound)
    high = (advantages > 0) & (ratio > high_bound)
    return SurrogateOut(loss, low, high)


@register_surrogate("dual_clip")
def dual_clip(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
) -> SurrogateOut:
    """Dual-clip PPO (Ye 2020, arXiv 1912.09729, Eq. 6): for Â < 0, ℓ = min(ℓ_clip, −c·Â).

    Bounds the loss (and zeroes the gradient) when ρ ≫ 1 on a negative-advantage token.
    """
    base = clip(ratio, advantages, logprobs, params)
    bounded = torch.minimum(base.loss, -params.dual_clip_c * advantages)
    loss = torch.where(advantages < 0, bounded, base.loss)
    high = base.clipped_high | ((advantages < 0) & (ratio > params.dual_clip_c))
    return SurrogateOut(loss, base.clipped_low, high)


@register_surrogate("cispo")
def cispo(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
) -> SurrogateOut:
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1): ℓ = −sg(clip(ρ, 1−ε_low, 1+ε_high))·Â·logπ.

    The importance weight is clipped, never the gradient: every token keeps ∂ℓ/∂logπ =
    −w·Â. The `minpro` recipe applies it to the prefix-minimum ratio; that pairing is
    rlvr's choice, not a form the MinPRO paper is known to use (docs/methods.md).
    """
    low_bound, high_bound = 1.0 - params.clip_low, 1.0 + params.clip_high
    weight = ratio.detach().clamp(low_bound, high_bound)
    loss = -weight * advantages * logprobs
    low = ratio.detach() < low_bound
    high = ratio.detach() > high_bound
    return SurrogateOut(loss, low, high)


@register_surrogate("reinforce")
def reinforce(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
) -> SurrogateOut:
    """Importance-sampled REINFORCE (Williams 1992): ℓ = −sg(ρ)·Â·logπ; no clipping.

    On-policy (ρ = 1) this is the plain policy gradient −Â·logπ.
    """
    loss = -ratio.detach() * advantages * logprobs
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return SurrogateOut(loss, never, never)
