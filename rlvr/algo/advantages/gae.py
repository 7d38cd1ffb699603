"""Generalized advantage estimation (Schulman 2016, arXiv 1506.02438, Eq. 16) and VAPO's
decoupled, length-adaptive variant (Yue 2025, arXiv 2504.05118, §4.1–4.2)."""

from __future__ import annotations

import torch

from rlvr.algo.advantages.token_advantages import outcome_token_rewards
from rlvr.algo.registry import AdvantageBatch, Params, register_advantage


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """δ_t = r_t + γV_{t+1} − V_t,  Â_t = Σ_l (γλ)^l δ_{t+l},  value target R_t = Â_t + V_t.

    token_rewards, values, response_mask: (N, T); V beyond the last valid token is 0 (the
    episode ends). lam: a float or a per-response tensor (N,). Returns (Â, R), each (N, T),
    0 on padding. Runs without gradient.
    """
    n, length = values.shape
    lam_t = torch.as_tensor(lam, dtype=values.dtype).expand(n)
    values = values.detach() * response_mask
    advantages = torch.zeros_like(values)
    next_value = torch.zeros(n, dtype=values.dtype)
    running = torch.zeros(n, dtype=values.dtype)
    for t in reversed(range(length)):
        valid = response_mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        # Masked positions pass the next valid state's value and running sum through.
        running = torch.where(valid > 0, delta + gamma * lam_t * running, running)
        advantages[:, t] = running * valid
        next_value = torch.where(valid > 0, values[:, t], next_value)
    returns = (advantages + values) * response_mask
    return advantages, returns


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float = 0.05) -> torch.Tensor:
    """VAPO §4.2: λ_policy = 1 − 1/(α·|y|), clamped to [0, 1].

    Departure: the paper targets thousands of tokens, where the formula is in (0, 1); for
    |y| < 1/α it goes negative, which no GAE admits, so we clamp at 0 (pure TD(0)).
    """
    lam = 1.0 - 1.0 / (alpha * lengths.to(torch.float64).clamp(min=1))
    return lam.clamp(0.0, 1.0)


def vapo_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    alpha: float = 0.05,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoupled GAE: value targets with λ_critic = 1, policy Â with λ_policy(|y_i|).

    Returns (policy advantages, value targets), each (N, T).
    """
    _, returns = gae(token_rewards, values, response_mask, gamma, 1.0)
    lam_policy = length_adaptive_lambda(response_mask.sum(-1), alpha).to(values.dtype)
    advantages, _ = gae(token_rewards, values, response_mask, gamma, lam_policy)
    return advantages, returns


def _token_rewards(batch: AdvantageBatch, params: Params) -> torch.Tensor:
    if batch.values is None:
        raise ValueError("a critic advantage (gae, vapo_gae) needs values from a critic")
    return outcome_token_rewards(batch.rewards, batch.response_mask, batch.kl, params.kl_coef)


@register_advantage("gae", needs_critic=True, token_rewards=True)
def gae_estimator(batch: AdvantageBatch, params: Params) -> tuple[torch.Tensor, torch.Tensor]:
    """`gae` over outcome token rewards (minus β·k when the KL is in the reward)."""
    rewards = _token_rewards(batch, params)
    return gae(rewards, batch.values, batch.response_mask, params.gamma, params.lam)


@register_advantage("vapo_gae", needs_critic=True, token_rewards=True)
def vapo_gae_estimator(batch: AdvantageBatch, params: Params) -> tuple[torch.Tensor, torch.Tensor]:
    """`vapo_gae` over outcome token rewards, with the recipe's α."""
    rewards = _token_rewards(batch, params)
    return vapo_gae(rewards, batch.values, batch.response_mask, params.gamma, params.vapo_alpha)
