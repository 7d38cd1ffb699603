"""Critic updates for PPO and VAPO: clipped value regression onto GAE value targets."""

from __future__ import annotations

import torch

from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.regularizers import value_loss
from rlvr.models.precision import autocast, model_device
from rlvr.models.value import ValueModel
from rlvr.train.records.rollout_record import Rollout


def critic_optimizer(critic: ValueModel, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """The critic's AdamW; the weight decay is always passed (torch's default is 0.01)."""
    return torch.optim.AdamW(critic.parameters(), lr=lr, weight_decay=weight_decay)


def critic_values(
    critic: ValueModel,
    rollout: Rollout,
    pad_id: int,
    micro_batch_size: int,
    precision: str = "fp32",
) -> torch.Tensor:
    """V_old (B, T) of every row, without gradient, the backbone in `precision`."""
    with autocast(precision, model_device(critic)):
        return rollout.forward_rows(lambda p, r, m: critic(p, r, m, pad_id), micro_batch_size)


def critic_update(
    critic: ValueModel,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    rows: torch.Tensor,
    *,
    clip_range: float | None,
    pad_id: int,
    micro_batch_size: int,
    max_grad_norm: float,
    precision: str = "fp32",
) -> float:
    """One optimizer step of L_V = token_mean ½·max((V−R)², (clip(V, V_old±c)−R)²) on `rows`.

    Returns the loss value. Token-mean weights come from the step's global token count, so
    micro-batching does not change the gradient.
    """
    index = rows.nonzero().squeeze(-1)
    weights = torch.zeros_like(response_mask)
    weights[index] = aggregation_weights(
        "token_mean", response_mask[index], rollout.group_ids[index]
    )
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for micro in torch.split(index, micro_batch_size):
        # Attend to every present token; regress only on the loss mask's tokens. The
        # backbone in `precision`, the value head and the loss in float32.
        with autocast(precision, model_device(critic)):
            values = critic(
                [rollout.prompt_ids[i] for i in micro.tolist()],
                rollout.response_ids[micro],
                rollout.response_mask[micro],
                pad_id,
            )
        values = values * response_mask[micro]
        per_token = value_loss(values, rollout.values[micro], returns[micro], clip_range)
        loss = (per_token * weights[micro]).sum()
        loss.backward()
        total += float(loss.detach())
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
    optimizer.step()
    return total


def explained_variance(values, returns, mask) -> float:
    """1 − Var(R − V) / Var(R) over the positions where `mask` > 0 (0 with fewer than two,
    or when the returns do not vary): how much of the returns' variance the critic
    explains."""
    valid = mask > 0
    if valid.sum() < 2:
        return 0.0
    v, r = values[valid].double(), returns[valid].double()
    var = r.var()
    return float(1.0 - (r - v).var() / var) if var > 0 else 0.0
