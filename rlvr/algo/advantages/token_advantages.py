"""Token-level advantages of REINFORCE++ (Hu 2025, arXiv 2501.03262, §3).

Both whiten over every valid token of the *global* rollout batch, so they must be computed
once per rollout batch before micro-batching (as every advantage here is).
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages.estimators import group_mean_baseline
from rlvr.algo.advantages.whiten import masked_whiten
from rlvr.algo.registry import AdvantageBatch, Params, register_advantage


def reward_to_go(
    token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """R_{i,t} = Σ_{s≥t} γ^{s−t} m_{i,s} r_{i,s}. (N, T) → (N, T), 0 on padding.

    s − t counts valid tokens only: a masked hole (an engine-inserted token) is not a step
    of the policy, so it neither discounts nor contributes (as in `gae`).
    """
    masked = token_rewards * response_mask
    if gamma == 1.0:
        return masked.flip(-1).cumsum(-1).flip(-1) * response_mask
    returns = torch.zeros_like(masked)
    running = torch.zeros_like(masked[:, 0])
    for t in reversed(range(masked.shape[-1])):
        valid = response_mask[:, t] > 0
        running = torch.where(valid, masked[:, t] + gamma * running, running)
        returns[:, t] = running
    return returns * response_mask


def outcome_token_rewards(
    rewards: torch.Tensor, response_mask: torch.Tensor, kl: torch.Tensor | None, kl_coef: float
) -> torch.Tensor:
    """Outcome reward on each response's last valid token, minus β·k_{i,t} on every token.

    rewards (N,), response_mask (N, T), kl (N, T) or None → token rewards (N, T).
    """
    # The last *valid* position: masks may have holes (engine-inserted tokens), so the
    # count of valid tokens minus one is not it.
    steps = response_mask.shape[-1]
    last = steps - 1 - (response_mask > 0).flip(-1).to(torch.long).argmax(-1)
    has_tokens = (response_mask > 0).any(-1).to(rewards.dtype)
    token_rewards = torch.zeros_like(response_mask, dtype=rewards.dtype)
    token_rewards[torch.arange(len(rewards)), last] = rewards * has_tokens
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * kl * response_mask
    return token_rewards


def reinforce_pp(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
) -> torch.Tensor:
    """REINFORCE++: r_{i,t} = [t = last]·r_i − β·k_{i,t}, R_{i,t} = Σ_{s≥t} γ^{s−t} r_{i,s};
    Â = whiten(R) over the global batch."""
    returns = reward_to_go(
        outcome_token_rewards(rewards, response_mask, kl, kl_coef), response_mask, gamma
    )
    return masked_whiten(returns, response_mask)


def reinforce_pp_baseline(
    rewards: torch.Tensor, group_ids: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++-baseline: x_i = r_i − mean_g r on every token; Â = whiten(x) over the batch.

    Constant groups get x = 0 exactly (as in `group_mean_baseline`), so the zero-advantage
    skip recognises them; whitening then shifts them by −mean/std like every other row.
    """
    centred = group_mean_baseline(rewards, group_ids)
    return masked_whiten(centred[:, None] * response_mask, response_mask)


@register_advantage("reinforce_pp", token_rewards=True)
def reinforce_pp_estimator(batch: AdvantageBatch, params: Params) -> tuple[torch.Tensor, None]:
    """`reinforce_pp` on the batch, with the recipe's γ and in-reward β."""
    mask = batch.response_mask
    return reinforce_pp(batch.rewards, mask, batch.kl, params.kl_coef, params.gamma), None


@register_advantage("reinforce_pp_baseline", group_baseline=True)
def reinforce_pp_baseline_estimator(
    batch: AdvantageBatch, params: Params
) -> tuple[torch.Tensor, None]:
    """`reinforce_pp_baseline` on the batch."""
    return reinforce_pp_baseline(batch.rewards, batch.group_ids, batch.response_mask), None
