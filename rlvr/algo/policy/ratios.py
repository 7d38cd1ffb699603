"""Importance ratios between the current and the old policy (docs/algorithms.md §2).

Every function maps log-probs (N, T) to a ratio tensor (N, T) that keeps its gradient where
the method wants one; sequence ratios are broadcast over the response's tokens so that a
single aggregation applies to every method. Log-ratios are clamped to ±20 before exp.
"""

from __future__ import annotations

import torch

from rlvr.algo.registry import register_ratio

MAX_LOG_RATIO = 20.0


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - old_logprobs.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _sequence_mean(x: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(1/|y_i|) Σ_t m_{i,t} x_{i,t}: (N, T) → (N,); 0 for empty responses."""
    return (x * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)


@register_ratio("token")
def token_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """PPO (Schulman 2017, arXiv 1707.06347, Eq. 6): ρ_{i,t} = π(y_t|·)/π_old(y_t|·) = exp(Δ_{i,t})."""
    return _log_ratio(logprobs, old_logprobs).exp()


@register_ratio("sequence", sequence_level=True)
def sequence_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO (Zheng 2025, arXiv 2507.18071, Eq. 7): s_i = exp((1/|y_i|) Σ_t Δ_{i,t}).

    One ratio per response, broadcast to (N, T); its gradient flows through the mean.
    """
    delta = (logprobs - old_logprobs.detach()) * response_mask
    mean = _sequence_mean(delta, response_mask).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return mean.exp()[:, None].expand_as(logprobs)


@register_ratio("sequence_token", sequence_level=True)
def sequence_token_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO-token (arXiv 2507.18071, Eq. 14): s_{i,t} = sg(s_i) · π(y_t|·)/sg(π(y_t|·)).

    Numerically s_i on every token; the gradient is per token, so a token-varying Â is
    allowed. Equals `sequence_ratio` in value and gradient when Â is constant per response.
    """
    seq = sequence_ratio(logprobs, old_logprobs, response_mask).detach()
    return seq * (logprobs - logprobs.detach()).exp()


@register_ratio("prefix_min")
def prefix_min_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """MinPRO (Lei 2026, arXiv 2601.22718): sg(ρ̲_t)·ρ_t, ρ̲_t = min_{j<t} ρ_{i,j}, ρ̲_1 = 1.

    The paper's abstract states only that MinPRO replaces the cumulative prefix ratio
    Π_{j≤t} ρ_{i,j} by a non-cumulative surrogate built on the minimum token ratio of the
    *preceding* prefix (j < t). The product with the current ρ_t and the stop-gradient on
    ρ̲_t are not in the abstract: they follow secondary write-ups and one third-party
    reimplementation, unchecked against the paper's body. The surrogate loss it
    feeds is the recipe's choice: `minpro` (CISPO-style weight, rlvr's reading) or
    `minpro_clip` (PPO clip); see docs/methods.md. Padding never enters the minimum.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs)
    inf = torch.full_like(log_ratio, torch.inf)
    masked = torch.where(response_mask > 0, log_ratio, inf)
    # Exclusive prefix minimum: shift right by one so token t sees only j < t.
    shifted = torch.cat([inf[:, :1], masked[:, :-1]], dim=-1)
    prefix_min = torch.cummin(shifted, dim=-1).values
    # An empty prefix (the first token) has ρ̲ = 1, i.e. log ρ̲ = 0.
    prefix_min = torch.where(torch.isinf(prefix_min), torch.zeros_like(prefix_min), prefix_min)
    return (prefix_min.detach() + log_ratio).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
