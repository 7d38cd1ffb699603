"""A step's logged numbers, computed once from what was sampled and what was trained.

Every count here is the count the update used: `trained_tokens` is the prepared batch's
response mask (after dynamic sampling, zero-variance selection and overlong filtering),
`kept_groups` the groups with a row left in it. Whatever was generated and not trained on
is discarded, and its share of the rollout time is `time/discarded_rollout_s`.
"""

from __future__ import annotations

import torch

from rlvr.algo import PreparedBatch, selection_metrics
from rlvr.train.collect import Collected
from rlvr.train.records.episode_metrics import episode_metrics
from rlvr.train.records.rollout_record import Rollout


def step_metrics(
    collected: Collected, prepared: PreparedBatch | None, prompts_per_step: int
) -> dict[str, float]:
    """The step's sampling, cost and selection metrics. `prepared` is the prepared batch
    of `collected.rollout` (None when dynamic sampling kept nothing)."""
    every = collected.generated
    generated = float(every.loss_mask.sum()) + collected.dropped_tokens
    selected = {"rollout/kept_groups": 0.0, "rollout/trained_tokens": 0.0}
    if prepared is not None:
        selected = selection_metrics(prepared, collected.rollout.group_ids)
    discarded = generated - selected["rollout/trained_tokens"]
    rollout_s = collected.rollout_s
    return {
        "rollout/candidate_groups": float((collected.refills + 1) * prompts_per_step),
        "rollout/refill_rounds": float(collected.refills),
        "rollout/generated_tokens": generated,
        "rollout/discarded_tokens": discarded,
        "rollout/generated_responses": float(len(every)),
        "rollout/truncated_frac": float(every.truncated.float().mean()),
        "rollout/interrupted_frac": _interrupted_frac(every),
        "rollout/response_length": float(every.lengths.mean()),
        **length_by_outcome(every.lengths, every.correct),
        "reward/mean": float(every.rewards.mean()),
        "reward/accuracy": float(every.correct.mean()),
        "reward/format_rate": float(every.formatted.mean()),
        "reward/failed_samples": _failed_samples(every),
        **selected,
        **uniform_groups(every.correct, every.group_ids),
        **episode_metrics(every.episodes),
        # Generation time is proportional to tokens: the discarded tokens' share of it.
        "time/rollout_s": rollout_s,
        "time/refill_s": rollout_s - collected.first_round_s,
        "time/discarded_rollout_s": rollout_s * discarded / max(generated, 1.0),
        **collected.pool,
        **collected.extra,
    }


def length_by_outcome(lengths: torch.Tensor, correct: torch.Tensor) -> dict[str, float]:
    """Mean length of the correct and of the incorrect responses; a key is left out when
    no response has that outcome (a mean over nothing is not 0)."""
    out = {}
    for name, rows in (("correct", correct.bool()), ("incorrect", ~correct.bool())):
        if rows.any():
            out[f"rollout/{name}_length"] = float(lengths[rows].float().mean())
    return out


def uniform_groups(correct: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Generated groups whose responses were all correct, and all wrong: the two kinds of
    zero-variance group (no signal) that dynamic sampling and the filters drop."""
    _, index = torch.unique(group_ids, return_inverse=True)
    size = torch.zeros(int(index.max()) + 1).index_add_(0, index, torch.ones_like(correct))
    right = torch.zeros_like(size).index_add_(0, index, correct.float())
    return {
        "rollout/all_correct_groups": float((right == size).sum()),
        "rollout/all_wrong_groups": float((right == 0).sum()),
    }


def _failed_samples(rollout: Rollout) -> float:
    """Generated responses on which some reward function failed (rlvr.rewards.guard)."""
    return 0.0 if rollout.reward_failed is None else float(rollout.reward_failed.sum())


def _interrupted_frac(rollout: Rollout) -> float:
    """Fraction of responses that reached the thinking budget and got the end phrase (an
    episode's forced tokens are observations: `env/` metrics)."""
    if rollout.forced_mask is None or rollout.episodes is not None:
        return 0.0
    return float((rollout.forced_mask.sum(-1) > 0).float().mean())
