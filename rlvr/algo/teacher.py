"""On-policy distillation (docs/algorithms.md §9): a teacher's log-probs of the tokens the
student sampled become a dense, per-token advantage.

The teacher never generates. It scores the student's exact token ids after its own prompt
(for OPSD the student's frozen copy with the reference solution in view), and the
per-token gap log π_S − log π_T, a one-sample estimate of the reverse KL, is the signal.
Pure functions of tensors; the loop adds the teacher's log-probs to the rollout.
"""

from __future__ import annotations

import torch

from rlvr.algo.registry import AdvantageBatch, Params, register_advantage

NO_OUTCOME = "none"
"""The advantage name of teacher-only recipes: no outcome advantage at all."""


def teacher_advantages(
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """On-policy distillation's token advantage (Agarwal 2024, GKD, arXiv 2306.13649, the
    reverse-KL case; Thinking Machines 2025, "On-Policy Distillation"):
    A_t = −β·(log π_S(y_t | c_S, y_<t) − log π_T(y_t | c_T, y_<t)) on tokens with m_t = 1.

    All (N, T) → (N, T); 0 where the mask is 0 (observation tokens, padding) whatever the
    log-probs hold there. log π_S is the student's log-prob before the update (π_old), a
    constant: no gradient flows through the advantage, which the surrogate then weighs as
    any token advantage (the lab uses ρ·A without clipping, i.e. `reinforce`).
    """
    valid = response_mask > 0
    gap = torch.where(valid, student_logprobs - teacher_logprobs, torch.zeros_like(response_mask))
    return -beta * gap


@register_advantage(NO_OUTCOME)
def no_outcome(batch: AdvantageBatch, params: Params) -> tuple[torch.Tensor, None]:
    """No outcome advantage: Â_outcome = 0 on every token, so with `teacher_kl_coef` > 0
    the teacher's term alone trains (OPD, OPSD); the reward is still logged."""
    return torch.zeros_like(batch.response_mask), None


def reverse_kl_metrics(
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    correct: torch.Tensor,
) -> dict[str, float]:
    """k_t = log π_S(y_t) − log π_T(y_t) over the policy tokens (m_t = 1) of a batch:
    its token mean and standard deviation (population), the mean over responses of Σ_t k_t,
    and the token mean over correct and over wrong responses (a key is left out when no
    response has that outcome). (N, T), (N,) → metrics; {} when no token is valid."""
    valid = response_mask > 0
    if not valid.any():
        return {}
    gap = (student_logprobs - teacher_logprobs).double()
    tokens = gap[valid]
    rows = valid.any(-1)
    per_sequence = torch.where(valid, gap, torch.zeros_like(gap)).sum(-1)[rows]
    out = {
        "distill/reverse_kl": float(tokens.mean()),
        "distill/reverse_kl_std": float(tokens.std(correction=0)),
        "distill/reverse_kl_seq": float(per_sequence.mean()),
    }
    for name, outcome in (("correct", correct.bool()), ("wrong", ~correct.bool())):
        picked = valid & outcome[:, None]
        if picked.any():
            out[f"distill/reverse_kl_{name}"] = float(gap[picked].mean())
    return out
