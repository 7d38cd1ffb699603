"""The composition layer: a recipe's choices applied to one optimizer step's batch.

`prepare_batch` runs once per rollout batch, without gradient, over the *whole* batch:
selection, shaping, advantages and aggregation weights. `policy_loss` runs per
micro-batch on any subset of the prepared rows; its losses sum to the whole-batch loss.
Nothing here branches on a recipe's name: it reads the recipe's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlvr.algo.advantages.whiten import masked_whiten
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.rollout_correction import ROLLOUT_CORRECTIONS, divergence_rejection_mask
from rlvr.algo.recipes import Recipe
from rlvr.algo.registry import ADVANTAGES, KL_ESTIMATORS, SELECTIONS, AdvantageBatch
from rlvr.algo.selection import sampling_signal, shaped_rewards
from rlvr.algo.teacher import teacher_advantages


@dataclass
class PreparedBatch:
    """Per-row training targets for the whole batch; dropped rows are all zeros."""

    keep: torch.Tensor  # (N,) bool: rows that stay in the batch after selection
    shaped_rewards: torch.Tensor  # (N,) the reward advantages were computed from
    response_mask: torch.Tensor  # (N, T) after overlong filtering and selection
    advantages: torch.Tensor  # (N, T)
    loss_weights: torch.Tensor  # (N, T) aggregation weights from global counts
    nll_weights: torch.Tensor | None  # (N, T) token-mean weights over correct responses
    returns: torch.Tensor | None  # (N, T) value targets (critic recipes)
    rejected: torch.Tensor | None = None  # (N, T) bool: tokens rejection took out; None: off
    advantage_metrics: dict[str, float] = field(default_factory=dict)  # the estimator's own

    @property
    def sampled_mask(self) -> torch.Tensor:
        """(N, T) the kept tokens before rejection: `response_mask` plus the rejected ones."""
        if self.rejected is None:
            return self.response_mask
        return self.response_mask + self.rejected.to(self.response_mask.dtype)


def compute_advantages(
    recipe: Recipe,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    kl: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    **teacher: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token advantages (N, T) and value targets (N, T) or None, per `recipe.advantage`;
    with `recipe.whiten_advantages` the advantages (never the value targets) are whitened
    over every valid token of the batch. `teacher`: old_logprobs, teacher_logprobs and
    turn_ids (N, T), for an estimator with needs_teacher."""
    advantages, returns, _ = _estimate(
        recipe, AdvantageBatch(rewards, group_ids, response_mask, kl, values, **teacher)
    )
    return advantages, returns


def _estimate(recipe: Recipe, batch: AdvantageBatch) -> tuple:
    """(Â, value targets or None, the estimator's metrics) of `batch`."""
    out = ADVANTAGES.get(recipe.advantage).fn(batch, recipe.params)
    advantages, returns, metrics = (*out, {}) if len(out) == 2 else out
    if recipe.whiten_advantages:
        advantages = masked_whiten(advantages, batch.response_mask)
    return advantages, returns, metrics


def select_rows(
    recipe: Recipe, correct: torch.Tensor, rewards: torch.Tensor, group_ids: torch.Tensor
) -> torch.Tensor:
    """Rows kept by the registered filters the recipe switches on. (N,) → (N,) bool.

    `correct`: what dynamic sampling keys on (`sampling_signal`); `rewards`: shaped."""
    keep = torch.ones_like(group_ids, dtype=torch.bool)
    for selection in SELECTIONS:
        if getattr(recipe, selection.name):
            keep &= selection.fn(correct, rewards, group_ids)
    return keep


@torch.no_grad()
def prepare_batch(
    recipe: Recipe,
    *,
    rewards: torch.Tensor,
    correct: torch.Tensor,
    truncated: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    max_new_tokens: int,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    teacher_logprobs: torch.Tensor | None = None,
    sampler_logprobs: torch.Tensor | None = None,
    turn_ids: torch.Tensor | None = None,
) -> PreparedBatch:
    """Selection → shaping → rejection → advantages → aggregation weights, over the whole batch.

    `lengths` (N,): |y| as `max_new_tokens` counts it, for the overlong ramp; it differs
    from `response_mask.sum(-1)` when the mask leaves out engine-inserted tokens (forced
    interruption), which use up the budget too. Default: `response_mask.sum(-1)`.
    `teacher_logprobs` (N, T): a teacher's log π_T of the same tokens; with
    `recipe.teacher_kl_coef` > 0, Â = Â_outcome + λ·A_teacher on the kept policy tokens
    (after any whitening of Â_outcome), log π_S being `old_logprobs`.
    `sampler_logprobs` (N, T): the rollout engine's log-probs; with a rejection on
    (`rejection_on`) the tokens it rejects by π_old/π_sampler leave the mask before
    advantages and weights, as verl edits `response_mask` (so every normaliser, the KL and
    the entropy terms; a response left with no token leaves the sequence count, though its
    reward still counts in its group's statistics, as in verl). A batch left with no token
    at all keeps no row, so the loop skips its update (`train/update_skipped`).
    `turn_ids` (N, T) long: each token's agent turn k ≥ 1 (0: none), for an advantage with
    needs_teacher (AgentOPSD); None: every response is one turn.
    """
    if lengths is None:
        lengths = response_mask.sum(-1)
    cache = recipe.overlong_cache if recipe.overlong_penalty else None
    reward = shaped_rewards(rewards.double(), lengths, max_new_tokens, cache)
    signal = sampling_signal(recipe.dynamic_sampling_key, correct, rewards.double())
    keep = select_rows(recipe, signal, reward, group_ids)
    mask = response_mask * keep[:, None]
    if recipe.overlong_filter:
        mask = mask * (~truncated)[:, None]
    mask, rejected = _reject(recipe, mask, old_logprobs, sampler_logprobs)
    kl = None
    if recipe.kl_in_reward:
        kl = KL_ESTIMATORS.get(recipe.kl).fn(old_logprobs, ref_logprobs) * mask
    rows = keep.nonzero().squeeze(-1)
    sub = lambda x: None if x is None else x[rows]  # noqa: E731
    advantages = torch.zeros_like(mask, dtype=torch.float64)
    returns = torch.zeros_like(advantages) if recipe.needs_critic else None
    metrics = {}
    if len(rows):
        teacher = map(sub, (old_logprobs, teacher_logprobs, turn_ids))
        batch = AdvantageBatch(
            reward[rows], group_ids[rows], mask[rows].double(), sub(kl), sub(values), *teacher
        )
        adv, ret, metrics = _estimate(recipe, batch)
        advantages[rows] = adv.double()
        if returns is not None:
            returns[rows] = ret.double()
    if recipe.teacher_kl_coef:
        advantages = advantages + recipe.teacher_weight * _teacher_term(
            recipe, old_logprobs, teacher_logprobs, mask
        )
    if rejected is not None and rejected.any() and not mask.any():
        keep = torch.zeros_like(keep)  # every token rejected: nothing to train, the loop skips
    weights, nll = step_weights(recipe, mask.double(), group_ids, correct, keep, max_new_tokens)
    dtype = response_mask.dtype
    cast = lambda x: None if x is None else x.to(dtype)  # noqa: E731
    return PreparedBatch(
        keep,
        reward,
        mask,
        cast(advantages),
        cast(weights),
        cast(nll),
        cast(returns),
        rejected,
        metrics,
    )


def _reject(recipe, mask, old_logprobs, sampler_logprobs):
    """(the mask without the tokens the recipe rejects, those tokens as (N, T) bool), or
    (mask, None) with no rejection or no sampler log-probs."""
    if sampler_logprobs is None or not rejection_on(recipe):
        return mask, None
    kept = mask * rejection_mask(recipe, old_logprobs, sampler_logprobs, mask)
    return kept, (mask > 0) & (kept == 0)


def rejection_on(recipe: Recipe) -> bool:
    """Whether the recipe rejects tokens by π_old/π_sampler (an `<level>_rs` correction
    or `rc_reject`): then `prepare_batch` needs π_old and the sampler's log-probs."""
    choice = recipe.correction[0]
    return recipe.rc_reject is not None or (
        choice is not None and ROLLOUT_CORRECTIONS.get(choice).rejects
    )


def rejection_mask(
    recipe: Recipe,
    old_logprobs: torch.Tensor | None,
    sampler_logprobs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """(N, T) 1 on the tokens of `mask` that every rejection of the recipe keeps: the
    ratio band of an `<level>_rs` correction and verl's divergence rejection `rc_reject`."""
    if old_logprobs is None:
        raise ValueError(
            f"rollout_correction={recipe.correction[0]!r} / rc_reject={recipe.rc_reject!r} "
            "reject tokens by π_old/π_sampler before the advantages: prepare_batch needs "
            "old_logprobs (π_old) with the sampler_logprobs"
        )
    keep = mask
    choice, lower, upper = recipe.correction
    if choice is not None and ROLLOUT_CORRECTIONS.get(choice).rejects:
        keep = keep * ROLLOUT_CORRECTIONS.get(choice).fn(
            old_logprobs, sampler_logprobs, mask, lower, upper
        )
    if recipe.rc_reject is not None:
        keep = keep * divergence_rejection_mask(
            old_logprobs, sampler_logprobs, mask, recipe.rc_reject, recipe.rc_reject_max
        )
    return keep


def _teacher_term(recipe, old_logprobs, teacher_logprobs, mask) -> torch.Tensor:
    """A_teacher (N, T) in float64, 0 outside `mask` (dropped rows, non-policy tokens)."""
    if old_logprobs is None or teacher_logprobs is None:
        raise ValueError(
            f"teacher_kl_coef={recipe.teacher_kl_coef} needs the student's old_logprobs and "
            f"the teacher's teacher_logprobs of the same tokens"
        )
    return teacher_advantages(
        old_logprobs.double(), teacher_logprobs.double(), mask.double(), recipe.teacher_kl_coef
    )


def step_weights(
    recipe: Recipe,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    rows: torch.Tensor,
    max_new_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Aggregation weights (and NLL weights) of one optimizer step's rows, from its counts.

    `rows` (N,) bool selects the rows of this optimizer step (the whole batch, or one
    minibatch when a rollout batch feeds several steps); all other rows get weight 0.
    NLL weights (VAPO §4.3): token mean over the step's correct responses.
    """
    weights = torch.zeros_like(response_mask)
    idx = rows.nonzero().squeeze(-1)
    if len(idx):
        weights[idx] = aggregation_weights(
            recipe.aggregation, response_mask[idx], group_ids[idx], max_new_tokens
        )
    if not recipe.nll_coef:
        return weights, None
    positive = response_mask * (correct.to(response_mask.dtype) * rows)[:, None]
    return weights, positive / positive.sum().clamp(min=1)


def selection_metrics(prepared: PreparedBatch, group_ids: torch.Tensor) -> dict[str, float]:
    """What selection and filtering left to train on: kept groups and responses, trained
    tokens (the response mask the loss uses), the shaped reward's mean and, with a
    rejection on, the share of tokens and of responses it took out."""
    keep = prepared.keep
    rows_with_signal = (prepared.advantages != 0).any(-1) & keep
    metrics = {
        "rollout/kept_groups": float(torch.unique(group_ids[keep]).numel()),
        "rollout/kept_responses": float(keep.sum()),
        "rollout/trained_tokens": float(prepared.response_mask.sum()),
        "reward/shaped_mean": float(prepared.shaped_rewards.mean()),
        "reward/zero_adv_frac": float(1.0 - rows_with_signal.sum() / keep.sum().clamp(min=1)),
    }
    if prepared.rejected is not None:
        rejected, trained = prepared.rejected, prepared.response_mask > 0
        tokens = int(rejected.sum()) + int(trained.sum())
        rows = int((rejected.any(-1) | trained.any(-1)).sum())
        whole = int((rejected.any(-1) & ~trained.any(-1)).sum())
        metrics["rollout/rejected_token_frac"] = int(rejected.sum()) / max(tokens, 1)
        metrics["rollout/rejected_response_frac"] = whole / max(rows, 1)
    return {**metrics, **prepared.advantage_metrics}
