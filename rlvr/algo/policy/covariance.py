"""Covariance-selected tokens: Clip-Cov and KL-Cov (Cui 2025, "The Entropy Mechanism of
Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617, §4).

The paper ties entropy collapse to tokens whose centred advantage and centred log-prob
covary strongly: Cov_t = (Â_t − mean Â)·(logπ_t − mean logπ), means over the valid
tokens. Clip-Cov detaches the gradient of a random few of them; KL-Cov adds a |Δ| penalty
on the top few. Both follow verl's `compute_policy_loss_clip_cov` / `_kl_cov`
(docs/algorithms.md §3), including that the means, the count and the selection are over
the rows they are given: one micro-batch, so these two (unlike every other surrogate)
depend on the micro-batch split, as they do in verl (docs/conventions.md).
"""

from __future__ import annotations

import hashlib

import torch

from rlvr.algo.policy.surrogates import SurrogateOut, clip
from rlvr.algo.registry import Params, register_surrogate


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def token_covariance(
    advantages: torch.Tensor, logprobs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """Cov_t = (Â_t − mean Â)·(logπ_t − mean logπ) over the valid tokens, (N, T), no gradient."""
    logprobs = logprobs.detach()
    adv_dev = advantages - _masked_mean(advantages, response_mask)
    return adv_dev * (logprobs - _masked_mean(logprobs, response_mask))


def _count(ratio: float, response_mask: torch.Tensor) -> int:
    """max(⌊ratio·Σm⌋, 1): how many tokens the method selects (verl's clip_num / k)."""
    return max(int(ratio * float(response_mask.sum())), 1)


def clip_cov_selection(
    cov: torch.Tensor,
    clipped: torch.Tensor,
    response_mask: torch.Tensor,
    params: Params,
    generator: torch.Generator,
) -> torch.Tensor:
    """(N, T) bool: ⌊cov_ratio·Σm⌋ (at least 1) tokens drawn uniformly without replacement
    among the valid, unclipped tokens with lb < Cov_t < ub; fewer if fewer qualify."""
    band = (cov > params.clip_cov_lb) & (cov < params.clip_cov_ub)
    candidates = torch.nonzero(band & ~clipped & (response_mask > 0))  # (K, 2), row-major
    chosen = candidates[torch.randperm(len(candidates), generator=generator)]
    chosen = chosen[: _count(params.cov_ratio, response_mask)]
    selected = torch.zeros_like(cov, dtype=torch.bool)
    selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


def data_generator(*tensors: torch.Tensor) -> torch.Generator:
    """A CPU generator seeded by the bytes of `tensors` (the valid tokens' Cov): the same
    inputs draw the same tokens (the logged gradient mask is the one used; a resumed run
    repeats the draw; padding or an observation span does not move it), different batches
    draw differently, and no global RNG state is consumed."""
    digest = hashlib.sha256()
    for x in tensors:
        digest.update(x.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest()[:8], "little") >> 1)


@register_surrogate("clip_cov", needs_mask=True, per_micro_batch=True)
def clip_cov(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
    *,
    response_mask: torch.Tensor,
) -> SurrogateOut:
    """Clip-Cov (arXiv 2505.22617, §4.2): ℓ = ℓ_clip·(1 − s), s = 1 on the selected tokens.

    ℓ_clip is PPO's clip (no dual clip); `clip_cov_selection` picks the tokens whose
    gradient is detached (their loss is 0): cov_ratio = 2e-4 of the valid tokens, among
    those unclipped with 1 < Cov < 5 (verl's defaults). The random draw is seeded by the
    inputs (`data_generator`) instead of verl's global `torch.randperm`.
    """
    base = clip(ratio, advantages, logprobs, params)
    cov = token_covariance(advantages, logprobs, response_mask)
    clipped = base.clipped_low | base.clipped_high
    generator = data_generator(cov[response_mask > 0])
    selected = clip_cov_selection(cov, clipped, response_mask, params, generator)
    loss = base.loss * (~selected)
    return SurrogateOut(
        loss,
        base.clipped_low | (selected & (advantages < 0)),
        base.clipped_high | (selected & (advantages > 0)),
    )


def kl_cov_selection(cov: torch.Tensor, response_mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """(N, T) bool: the top ⌊ratio·Σm⌋ (at least 1) valid tokens by Cov_t (torch.topk)."""
    valid = response_mask > 0
    flat = torch.nonzero(valid.reshape(-1)).squeeze(-1)  # flat index of each valid token
    top = torch.topk(cov[valid], min(_count(ratio, response_mask), len(flat))).indices
    selected = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    selected[flat[top]] = True
    return selected.reshape(cov.shape)


@register_surrogate("kl_cov", needs_mask=True, per_micro_batch=True, bounds="none")
def kl_cov(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    params: Params,
    *,
    response_mask: torch.Tensor,
) -> SurrogateOut:
    """KL-Cov (arXiv 2505.22617, §4.2): ℓ = −ρ·Â + s·k·|Δ|, s = 1 on the top-Cov tokens.

    No clip at all: the unclipped ratio loss, plus a |logπ − logπ_old| penalty (k =
    kl_cov_coef, 1) on the cov_ratio = 2e-4 of valid tokens with the largest Cov_t (verl's
    defaults). No token is reported as clipped.
    """
    cov = token_covariance(advantages, logprobs, response_mask)
    selected = kl_cov_selection(cov, response_mask, params.cov_ratio)
    penalty = params.kl_cov_coef * torch.log(ratio).abs()
    loss = -ratio * advantages + selected * penalty
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return SurrogateOut(loss, never, never)
