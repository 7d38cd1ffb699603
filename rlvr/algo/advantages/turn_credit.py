"""AgentOPSD's turn credit (docs/20-agent-opsd.md): a self-teacher's log-prob gap, summed
over each agent turn, moves a belief that the trajectory succeeds; how much each turn
moved it rescales that turn's GRPO advantage by a factor in [1 − λ·δ, 1 + λ·δ], which is
never below 0, so a turn's advantage keeps the trajectory's sign.

Pure functions of tensors, computed in float64 without gradient. The lab's code is cited
as `advantages.py:N` and `teacher.py:N` of agentic-rl-lab/09-AgentOPSD.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages.groups import group_is_constant, group_mean, group_size, group_sum
from rlvr.algo.registry import AdvantageBatch, Params, register_advantage

EPS = 1e-4
"""ε of the lab (`AgentOPSDConfig.epsilon`, advantages.py:24): in the group std, the
belief clamp [ε, 1 − ε] and the per-trajectory credit std."""


def turn_ids_from_spans(
    spans: list[list[tuple[int, int]] | None], policy_mask: torch.Tensor
) -> torch.Tensor:
    """(N, T) long: k on the policy tokens of row i's k-th span [start, end) (k ≥ 1), 0 on
    every other token (observations, padding). `spans[i]`: the turns of an episode
    (`EpisodeRecord.spans`); None: a single-turn response, one turn over its policy tokens."""
    policy = policy_mask.detach().cpu() > 0  # filled on the CPU: one slice per turn
    ids = torch.zeros(policy.shape, dtype=torch.long)
    for i, row in enumerate(spans):
        if row is None:
            ids[i] = policy[i].long()
            continue
        for k, (start, end) in enumerate(row, start=1):
            ids[i, start:end] = k
    return torch.where(policy, ids, torch.zeros_like(ids)).to(policy_mask.device)


def sequence_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = EPS
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lab's GRPO advantage and initial belief (advantages.py:60-73, 94):
    A_i = (r_i − mean_g r) / (std_g r + ε) with the population std (np.std, ddof 0), and
    b_0 = clip(mean_g r, ε, 1 − ε). (N,) → (A (N,), b_0 (N,)).

    A group of equal rewards gets A = 0 exactly (the lab's (r − mean)/ε is 0 for its 0/1
    rewards, and ε-sized for a mean that leaves a rounding residue)."""
    rewards = rewards.double()
    mean = group_mean(rewards, group_ids)
    centred = rewards - mean
    std = (group_sum(centred * centred, group_ids) / group_size(group_ids)).sqrt()
    advantages = centred / (std + eps)
    constant = group_is_constant(rewards, group_ids)
    return torch.where(constant, torch.zeros_like(advantages), advantages), mean.clamp(eps, 1 - eps)


def turn_evidence(
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    turn_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """e_k = Σ_{t ∈ turn k} (log π_T(y_t) − log π_S(y_t)) over the turn's policy tokens
    (teacher.py:74-85). (N, T) → (evidence (N, K), present (N, K) bool), K the largest
    turn id; a turn with no token under the mask is absent (it takes no part below)."""
    ids = torch.where(response_mask > 0, turn_ids.long(), torch.zeros_like(turn_ids.long()))
    width = int(ids.max()) + 1 if ids.numel() else 1
    gap = torch.where(
        ids > 0,
        teacher_logprobs.double() - student_logprobs.double(),
        torch.zeros_like(student_logprobs, dtype=torch.float64),
    )
    evidence = gap.new_zeros(gap.shape[0], width).scatter_add(1, ids, gap)
    counts = gap.new_zeros(gap.shape[0], width).scatter_add(1, ids, (ids > 0).double())
    return evidence[:, 1:], counts[:, 1:] > 0


def belief_changes(
    evidence: torch.Tensor, present: torch.Tensor, initial_belief: torch.Tensor, decay: float
) -> torch.Tensor:
    """The belief recursion (advantages.py:94-104): c_k = γ·c_{k−1} + e_k (c_0 = 0),
    b_k = σ(logit b_0 + c_k), and Δb_k = b_k − b_{k−1}. (N, K), (N,) → Δb (N, K), 0 on
    absent turns, which leave c and b as they were."""
    logit = torch.log(initial_belief / (1 - initial_belief))
    cumulative = torch.zeros_like(initial_belief)
    before = initial_belief.clone()
    deltas = torch.zeros_like(evidence)
    for k in range(evidence.shape[1]):
        here = present[:, k]
        cumulative = torch.where(here, decay * cumulative + evidence[:, k], cumulative)
        after = torch.where(here, torch.sigmoid(logit + cumulative), before)
        deltas[:, k] = after - before
        before = after
    return deltas


def turn_weights(
    delta_belief: torch.Tensor,
    present: torch.Tensor,
    sign: torch.Tensor,
    bound: float,
    eps: float = EPS,
) -> torch.Tensor:
    """advantages.py:106-131: o_k = sign(A)·Δb_k; z_k = (o_k − mean o)/(std o + ε) over the
    trajectory's turns (population std); w_k = clip(1 + δ·z_k, 1 − δ, 1 + δ).
    (N, K) → w (N, K), 1 on absent turns."""
    credit = sign[:, None] * delta_belief
    count = present.sum(-1, keepdim=True).clamp(min=1)
    zero = torch.zeros_like(credit)
    mean = torch.where(present, credit, zero).sum(-1, keepdim=True) / count
    centred = torch.where(present, credit - mean, zero)
    std = (centred.square().sum(-1, keepdim=True) / count).sqrt()
    weights = (1 + bound * centred / (std + eps)).clamp(1 - bound, 1 + bound)
    return torch.where(present, weights, torch.ones_like(weights))


def agent_opsd_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    turn_ids: torch.Tensor,
    response_mask: torch.Tensor,
    decay: float = 0.95,
    reshape_lambda: float = 0.5,
    bound: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """AgentOPSD's turn-reshaped advantage (AgentOPSD, arXiv 2608.05987; the lab's
    `reshape_turn_advantages`, advantages.py:86-156):
    Â_t = A_i·((1 − λ) + λ·w_k) for a policy token t of turn k, with A_i, w_k as above,

    so Â_t / A_i ∈ [1 − λ·δ, 1 + λ·δ] (the lab's 0.9..1.1). (N,) and (N, T) → Â (N, T), 0
    off the mask, and the `turn/` metrics over the batch's present turns. How we differ:
    log π_S is π_old, the trainer's forward (the lab uses the sampler's log-probs), and a
    turn with no token under the mask (rejected by a rollout correction) takes no part."""
    advantages, belief = sequence_advantages(rewards, group_ids)
    if turn_ids is None:  # a single-turn response is one turn
        turn_ids = (response_mask > 0).long()
    evidence, present = turn_evidence(student_logprobs, teacher_logprobs, turn_ids, response_mask)
    deltas = belief_changes(evidence, present, belief, decay)
    weights = turn_weights(deltas, present, torch.sign(advantages), bound)
    multiplier = (1 - reshape_lambda) + reshape_lambda * weights  # (N, K)
    ids = torch.where(response_mask > 0, turn_ids.long(), torch.zeros_like(turn_ids.long()))
    per_token = torch.cat([torch.ones_like(multiplier[:, :1]), multiplier], 1).gather(1, ids)
    token_adv = torch.where(ids > 0, advantages[:, None] * per_token, torch.zeros_like(per_token))
    return token_adv, turn_metrics(evidence, deltas, weights, present)


def turn_metrics(
    evidence: torch.Tensor, deltas: torch.Tensor, weights: torch.Tensor, present: torch.Tensor
) -> dict[str, float]:
    """The lab's `opsd/` diagnostics (train.py:365-371) over every present turn of the batch,
    and mean |w − 1|, the share of the advantage the teacher moved; {} with no turn."""
    if not present.any():
        return {}
    w = weights[present]
    return {
        "turn/evidence_abs_mean": float(evidence[present].abs().mean()),
        "turn/delta_belief_abs_mean": float(deltas[present].abs().mean()),
        "turn/weight_mean": float(w.mean()),
        "turn/weight_min": float(w.min()),
        "turn/weight_max": float(w.max()),
        "turn/weight_dev_mean": float((w - 1).abs().mean()),
        "turn/turns_mean": float(present.sum(-1)[present.any(-1)].double().mean()),
    }


@register_advantage("turn_belief", group_baseline=True, needs_teacher=True)
def turn_belief(batch: AdvantageBatch, params: Params) -> tuple:
    """AgentOPSD (`agent_opsd_advantages`): the lab's GRPO advantage per response, rescaled
    per agent turn by the belief change the teacher's log-prob gap makes there."""
    if batch.teacher_logprobs is None or batch.old_logprobs is None:
        raise ValueError(
            "advantage='turn_belief' needs the teacher's teacher_logprobs and the student's "
            "old_logprobs of the same tokens: set `teacher` in the config (e.g. model: current)"
        )
    advantages, metrics = agent_opsd_advantages(
        batch.rewards,
        batch.group_ids,
        batch.old_logprobs,
        batch.teacher_logprobs,
        batch.turn_ids,
        batch.response_mask,
        params.turn_decay,
        params.turn_lambda,
        params.turn_weight_bound,
    )
    return advantages, None, metrics
