"""KL estimators (k1, k2, k3, k3+, the importance correction), value loss and the soft
overlong length penalty (docs/algorithms.md §5–6)."""

from __future__ import annotations

import torch

from rlvr.algo.registry import register_kl


@register_kl("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = Δ_ref = logπ − logπ_ref (Schulman 2020, "Approximating KL divergence")."""
    return logprobs - ref_logprobs


@register_kl("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = ½·Δ_ref²."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


@register_kl("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(−Δ_ref) + Δ_ref − 1 ≥ 0, GRPO's estimator (arXiv 2402.03300, Eq. 4).

    Δ_ref is clamped to ±20 so that exp never overflows.
    """
    delta = (logprobs - ref_logprobs).clamp(-20.0, 20.0)
    return torch.exp(-delta) + delta - 1.0


@register_kl("k3+")
def kl_k3_k2_grad(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3's value with k2's gradient: k = sg(k3) + k2 − sg(k2) (verl's straight-through
    "k3+" in `kl_penalty`; Schulman 2020). In the loss, E_π[∇k2] = E_π[Δ_ref·∇logπ] is
    the gradient of each token's KL(π‖π_ref), while E_π[∇k3] is that of the reverse
    KL(π_ref‖π) (docs/algorithms.md §5, "Which KL gradient"; tests/algo/test_algo_kl_bias.py)."""
    k2 = kl_k2(logprobs, ref_logprobs)
    return kl_k3(logprobs, ref_logprobs).detach() + k2 - k2.detach()


def importance_corrected(kl: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """ρ·k: the KL estimate weighted by the importance ratio π/π_old, gradient through both
    (DeepSeek-V3.2, arXiv 2512.02556; TRL's `use_bias_correction_kl`). Tokens are
    sampled from π_old, so E_{π_old}[ρ·k3] = E_π[k3] = KL(π‖π_ref) off-policy too."""
    return kl * ratio


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_range: float | None = 0.2,
) -> torch.Tensor:
    """Clipped value loss (PPO, arXiv 1707.06347; as in OpenAI baselines), per token (N, T):

    ½·max((V − R)², (clip(V, V_old − c, V_old + c) − R)²). clip_range None: ½·(V − R)².
    """
    unclipped = (values - returns) ** 2
    if clip_range is None:
        return 0.5 * unclipped
    old = old_values.detach()
    clipped = (old + (values - old).clamp(-clip_range, clip_range) - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped)


def soft_overlong_penalty(lengths: torch.Tensor, max_length: int, cache: int) -> torch.Tensor:
    """DAPO (arXiv 2503.14476, Eq. 13) soft overlong punishment R_len(|y|), (N,) → (N,):

    0 if |y| ≤ L_max − L_c;  (L_max − L_c − |y|)/L_c if L_max − L_c < |y| ≤ L_max;  −1 beyond.
    """
    if cache <= 0 or cache > max_length:
        raise ValueError(f"overlong_cache must be in 1..max_new_tokens={max_length}, got {cache}")
    lengths = lengths.to(torch.float64)
    soft_start = max_length - cache
    ramp = (soft_start - lengths) / cache
    penalty = torch.where(lengths <= soft_start, torch.zeros_like(lengths), ramp)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
