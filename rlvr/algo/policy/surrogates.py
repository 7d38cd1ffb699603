"""Per-token surrogate losses ℓ_{i,t} (docs/algorithms.md §3), to be *minimized*.

Each takes (ratio, advantages, logprobs, params) and returns the loss (N, T) and the boolean
masks of tokens whose ratio was clipped at the lower and the upper bound, for the clip
fractions. Bounds are given as ε in `params`: the ratio is clipped to
[1 − clip_low, 1 + clip_high]; clip_low = 1 means no lower bound.
"""

from __future__ import annotations

import math
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


@register_surrogate("reinforce", bounds="none")
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


@register_surrogate("sapo", bounds="none")
def sapo(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
) -> SurrogateOut:
    """SAPO (Gao 2025, arXiv 2511.20347): ℓ = −f_τ(ρ)·Â, f_τ(ρ) = (4/τ)·σ(τ·(ρ − 1)).

    A soft gate replaces the clip: ∂ℓ/∂logπ = −4·σ(1 − σ)·ρ·Â is −Â at ρ = 1 and fades
    smoothly as ρ leaves 1, never to exactly 0. τ = τ_pos where Â > 0, τ_neg otherwise
    (1.0 / 1.05, as verl's `compute_policy_loss_sapo` and TRL's `loss_type="sapo"`; a
    larger τ_neg fades negative updates faster). No token is "clipped" (docs/algorithms.md §3).
    """
    # In the advantages' dtype: torch.where of two Python floats would give float32 τ.
    temperature = torch.full_like(advantages, params.sapo_tau_neg)
    temperature = temperature.masked_fill(advantages > 0, params.sapo_tau_pos)
    gate = torch.sigmoid(temperature * (ratio - 1.0)) * (4.0 / temperature)
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return SurrogateOut(-gate * advantages, never, never)


@register_surrogate("gmpo", needs_mask=True, bounds="log_ratio", sequence_mean=True)
def gmpo(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
    *,
    response_mask: torch.Tensor,
    mean_mask: torch.Tensor | None = None,
) -> SurrogateOut:
    """GMPO (Zhao 2025, arXiv 2507.20673, §3): ℓ_i = −Ā_i·exp((1/|S_i|) Σ_{t∈S_i} Δ̃_t).

    The geometric mean of the token ratios, each clipped in log space with PPO's
    sign-aware min: Δ̃_t = min(Δ_t, ε_high) where Â > 0, max(Δ_t, −ε_low) otherwise, so
    the bounds are ratios exp(−clip_low), exp(clip_high) (the paper's §4: (e^−0.4, e^0.4)).
    S_i: the response's tokens in `mean_mask` (default: all of them; with an entropy
    quantile, only the selected ones, as TRL's GMPOTrainer drops low-entropy tokens from
    the mean; none selected: exp(0) = 1, as TRL). Ā_i is the mean advantage over the
    whole response; ℓ_i is broadcast over its tokens, so `seq_mean_token_mean` gives the
    peers' mean over responses. Expects the token ratio.
    """
    log_ratio = torch.log(ratio)  # (N, T) Δ_t, gradient 1 per token
    clipped = torch.where(
        advantages > 0, log_ratio.clamp(max=params.clip_high), log_ratio.clamp(min=-params.clip_low)
    )
    selected = response_mask if mean_mask is None else mean_mask
    seq_ratio = ((clipped * selected).sum(-1) / selected.sum(-1).clamp(min=1)).exp()  # (N,)
    seq_advantage = (advantages * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)
    loss = (-seq_advantage * seq_ratio)[:, None].expand_as(ratio)
    low = (advantages < 0) & (log_ratio.detach() < -params.clip_low)
    high = (advantages > 0) & (log_ratio.detach() > params.clip_high)
    return SurrogateOut(loss, low, high)


@register_surrogate("dppo_tv", bounds="probability", needs_anchor=True)
def dppo_tv(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
    *,
    anchor_logprobs: torch.Tensor | None = None,
) -> SurrogateOut:
    """DPPO-Binary-TV (Qi 2026, arXiv 2602.04879): ℓ = −M·sg(min(π/μ, C))·Â·logπ.

    A binary trust-region mask on the sampled token's probability change instead of a
    ratio clip: M = 0 where Â > 0 and π − μ > δ_high, or Â ≤ 0 and μ − π > δ_low
    (δ = clip_low / clip_high, 0.15 in the paper; C = is_cap, 20). Inside, every token keeps
    CISPO's gradient −w·Â. μ = exp(`anchor_logprobs`), the ratio's denominator: the
    sampler's probability under the recipe's `dppo_anchor: sampler` (the paper, TRL), π_old
    under `old` (docs/conventions.md). Mask and weight read log π − log μ unclamped, as TRL
    (the ±20 clamp of `ratio` would keep a token TRL masks, with weight e^−20); a caller
    that gives no `anchor_logprobs` (rlvr.service) gets μ rebuilt from that clamped ratio.
    """
    if anchor_logprobs is None:
        anchor_logprobs = logprobs.detach() - torch.log(ratio.detach())
    log_ratio = logprobs.detach() - anchor_logprobs.detach()
    prob, anchor_prob = logprobs.detach().exp(), anchor_logprobs.detach().exp()
    rose_too_far = (prob - anchor_prob) > params.clip_high
    fell_too_far = (anchor_prob - prob) > params.clip_low
    outside = torch.where(advantages > 0, rose_too_far, fell_too_far)
    weight = log_ratio.clamp(max=math.log(params.is_cap)).exp() * (~outside)
    loss = -weight * advantages * logprobs
    return SurrogateOut(loss, outside & (advantages < 0), outside & (advantages > 0))
