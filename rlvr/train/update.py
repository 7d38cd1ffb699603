"""Policy updates on one prepared rollout batch: minibatches (optimizer steps) split by
prompt group, micro-batches (gradient accumulation), and zero-advantage compute skipping.

Aggregation weights are computed per optimizer step from that step's global counts, so the
micro-batch size never changes the gradient (tests/train prove it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr.algo import StepStats, policy_loss
from rlvr.algo.loss import MISMATCH_MAX
from rlvr.algo.objective import PreparedBatch, step_weights
from rlvr.algo.recipes import Recipe
from rlvr.algo.registry import SURROGATES
from rlvr.models.fused_llama import supports
from rlvr.models.logprobs import response_logprobs
from rlvr.models.precision import autocast, model_device
from rlvr.train.memory_budget import micro_batch_rows
from rlvr.train.records.rollout_record import Rollout

if TYPE_CHECKING:
    from rlvr.train.distributed.data_parallel import DataParallel


@dataclass(frozen=True)
class UpdateSettings:
    num_minibatches: int
    ppo_epochs: int
    micro_batch_size: int
    max_grad_norm: float
    max_new_tokens: int
    temperature: float
    pad_id: int
    log_entropy: bool = True
    precision: str = "fp32"  # the forwards' autocast (rlvr/train/sampler/precision.py)
    activation_bytes: int | None = None
    """What `memory_budget_gib` leaves for saved activations (rlvr/train/memory_budget.py);
    None: every micro-batch holds `micro_batch_size` rows."""


def micro_batch_size(settings: UpdateSettings, model: torch.nn.Module, rollout: Rollout) -> int:
    """Rows per training micro-batch for this rollout: `micro_batch_size`, lowered so the
    longest row's saved activations times the rows fit in the memory budget. One number
    for the whole rollout, so every rank of a data-parallel run agrees on it."""
    config = getattr(model, "config", None)
    if settings.activation_bytes is None or not hasattr(config, "num_attention_heads"):
        return settings.micro_batch_size
    tokens = max(map(len, rollout.prompt_ids)) + rollout.response_ids.shape[1]
    return micro_batch_rows(
        config, tokens, settings.activation_bytes, settings.micro_batch_size, supports(model)
    )


def minibatch_rows(
    group_ids: torch.Tensor,
    keep: torch.Tensor,
    count: int,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Split the kept rows into `count` minibatches of whole prompt groups, as (N,) bool masks.

    With a `generator` the groups are shuffled first: call once per epoch so that every
    PPO epoch sees a fresh minibatch order (as TRL's PPO trainer does; verl keeps one
    split for all epochs, see docs/conventions.md).
    """
    groups = torch.unique(group_ids[keep])
    if generator is not None:
        groups = groups[torch.randperm(len(groups), generator=generator)]
    chunks = [c for c in torch.tensor_split(groups, min(count, max(len(groups), 1))) if len(c)]
    return [keep & torch.isin(group_ids, c) for c in chunks]


def skippable_rows(
    recipe: Recipe, advantages: torch.Tensor, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """Rows that contribute no gradient at all: every advantage 0 and no term but the
    advantage-weighted policy term in the loss (`gradient_only_from_advantages`). With
    `zero_adv_skip`, every such row; without, all rows when every `keep` row is one: the
    step's gradient is then exactly 0 and its forward/backward is skipped. (N,) bool."""
    none = torch.zeros(advantages.shape[0], dtype=torch.bool)
    if not gradient_only_from_advantages(recipe):
        return none
    zero = (advantages == 0).all(-1)
    if recipe.zero_adv_skip:
        return zero
    kept = zero if keep is None else zero[keep]
    return zero if bool(kept.all()) else none


def gradient_only_from_advantages(recipe: Recipe) -> bool:
    """Whether a row with Â = 0 everywhere adds exactly 0 to the gradient: no per-token
    regularizer (KL in the loss, entropy bonus, NLL) reaches it and the surrogate is a
    multiple of Â (not one with per-micro-batch token statistics, whose KL-Cov term does
    not vanish). A teacher acts through Â; a critic trains in its own update."""
    return not (
        (recipe.needs_reference and not recipe.kl_in_reward)
        or recipe.entropy_coef
        or recipe.entropy_target is not None  # adaptive: the bonus and its measured H
        or recipe.nll_coef
        or SURROGATES.get(recipe.surrogate).per_micro_batch
    )


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    recipe: Recipe,
    rollout: Rollout,
    prepared: PreparedBatch,
    settings: UpdateSettings,
    generator: torch.Generator | None = None,
    data_parallel: DataParallel | None = None,
    entropy_coef: float | None = None,
) -> dict[str, float]:
    """All optimizer steps of one rollout batch; returns the step's loss/clip/time metrics.
    `generator` reshuffles the minibatches of every epoch (None: the same fixed order).
    `entropy_coef`: the adaptive controller's c_H for this step (None: the recipe's).
    `data_parallel`: this rank computes its share of every step's prompt groups, and the
    gradients (whose weights are global) are summed over ranks (rlvr/train/distributed/ddp.py)."""
    start = time.perf_counter()
    stats = StepStats()
    skip = skippable_rows(recipe, prepared.advantages, prepared.keep)
    computed_rows = optimizer_steps = nonfinite = 0
    worst = None  # the largest |log π_old − log π_sampler| the loss saw
    coef = recipe.entropy_coef if entropy_coef is None else entropy_coef
    size = micro_batch_size(settings, model, rollout)
    for _ in range(settings.ppo_epochs):
        minibatches = minibatch_rows(
            rollout.group_ids, prepared.keep, settings.num_minibatches, generator
        )
        for rows in minibatches:
            weights, nll_weights = step_weights(
                recipe,
                prepared.response_mask,
                rollout.group_ids,
                rollout.correct,
                rows,
                settings.max_new_tokens,
            )
            optimizer.zero_grad(set_to_none=True)
            mine = rows if data_parallel is None else data_parallel.shard(rollout.group_ids, rows)
            active = rollout.by_length((mine & ~skip).nonzero().squeeze(-1))
            for micro in torch.split(active, size) if len(active) else ():
                micro_stats = _micro_step(
                    model, recipe, rollout, prepared, weights, nll_weights, micro, settings, coef
                )
                # A maximum, not a sum (rlvr/algo/loss.py): kept aside from the merge.
                if MISMATCH_MAX in micro_stats.sums:
                    worst = max(worst or 0.0, micro_stats.sums.pop(MISMATCH_MAX))
                stats.merge(micro_stats)
            computed_rows += len(active)
            if data_parallel is not None:
                computed = rows & ~skip
                for _ in range(data_parallel.idle_micro_batches(rollout.group_ids, computed, size)):
                    _idle_micro_step(model, rollout, int(rows.nonzero()[0]), settings)
                data_parallel.all_reduce_grads(model)
            norm, stepped = _clip_and_step(model, optimizer, settings.max_grad_norm)
            stats.add("train/grad_norm", norm)
            nonfinite += not stepped
            optimizer_steps += 1
    if data_parallel is not None:
        stats = data_parallel.reduce_stats(stats)
        worst = _max_over_ranks(worst)
    metrics = stats.finalize()
    if worst is not None:
        metrics[MISMATCH_MAX] = worst
    for key in [k for k in stats.sums if k.startswith(("loss/", "train/grad_norm"))]:
        metrics[key] = stats.sums[key] / max(optimizer_steps, 1)
    elapsed = time.perf_counter() - start
    skipped = int(skip[prepared.keep].sum()) * settings.ppo_epochs
    metrics.update(
        {
            # 1: no row was computed, the step's gradient being exactly 0 (skippable_rows).
            "train/backward_skipped": float(bool(skip[prepared.keep].all())),
            "train/optimizer_steps": float(optimizer_steps),
            "train/nonfinite_skipped": float(nonfinite),
            "train/skipped_rows": float(skipped),
            "train/micro_batch_rows": float(size),  # the rows per micro-batch used
            # Estimated from the measured cost per computed row.
            "time/skip_saved_s": elapsed / max(computed_rows, 1) * skipped,
            "time/policy_update_s": elapsed,
        }
    )
    return metrics


def _micro_step(
    model, recipe, rollout, prepared, weights, nll_weights, micro, settings, entropy_coef
):
    # An adaptive bonus needs the measured entropy even in steps where it is off.
    entropy_needed = (
        settings.log_entropy
        or recipe.entropy_target is not None
        or entropy_coef > 0
        or recipe.top_entropy_quantile < 1.0  # the selection reads each token's entropy
    )
    # The forward under autocast; log-probs come out float32, so the loss is float32 and
    # the backward (outside autocast) runs each product in its forward's dtype.
    with autocast(settings.precision, model_device(model)):
        out = response_logprobs(
            model,
            [rollout.prompt_ids[i] for i in micro.tolist()],
            rollout.response_ids[micro],
            rollout.response_mask[micro],  # attention: every present token
            settings.pad_id,
            settings.temperature,
            fp32_head=recipe.fp32_head,
            return_entropy=entropy_needed,
            entropy_grad=entropy_coef > 0,
        )
    logprobs, entropy = out if entropy_needed else (out, None)
    mask = prepared.response_mask[micro]
    # On-policy (one optimizer step per batch) π_old is the current policy itself.
    old = logprobs.detach() if rollout.old_logprobs is None else rollout.old_logprobs[micro]
    pick = lambda x: None if x is None else x[micro]  # noqa: E731
    loss, stats = policy_loss(
        recipe,
        logprobs=logprobs,
        old_logprobs=old,
        advantages=prepared.advantages[micro],
        loss_weights=weights[micro],
        response_mask=mask,
        ref_logprobs=pick(rollout.ref_logprobs),
        sampler_logprobs=rollout.sampler_logprobs[micro],
        sampled_mask=prepared.sampled_mask[micro],  # before rejection: the corrections' tokens
        entropy=entropy,
        nll_weights=pick(nll_weights),
        entropy_coef=entropy_coef,
    )
    loss.backward()
    if entropy is not None:
        stats.add_ratio("policy/entropy", (entropy.detach() * mask).sum(), mask.sum())
    return stats


def _max_over_ranks(value: float | None) -> float | None:
    """The largest of every rank's value (None where a rank had none)."""
    parts: list[float | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, value)
    present = [p for p in parts if p is not None]
    return max(present) if present else None


def _idle_micro_step(model, rollout, row: int, settings) -> None:
    """A forward/backward that adds exactly zero to every gradient (its loss is 0·Σ log π
    of one row): a sharded rank with fewer rows than another still takes part in every
    collective of the step (rlvr/train/distributed/fsdp.py)."""
    with autocast(settings.precision, model_device(model)):
        logprobs = response_logprobs(
            model,
            [rollout.prompt_ids[row]],
            rollout.response_ids[row : row + 1],
            rollout.response_mask[row : row + 1],
            settings.pad_id,
            settings.temperature,
        )
    (logprobs.sum() * 0.0).backward()


def _clip_and_step(model, optimizer, max_grad_norm: float) -> tuple[float, bool]:
    """Clip and apply the accumulated gradient; returns (its norm, whether it was applied).

    A non-finite norm (a NaN or infinite loss or gradient) is never applied: the gradient
    is dropped and the weights and optimizer state stay as they were."""
    if all(p.grad is None for p in model.parameters()):
        # Every row of this step was skipped (zero advantages). Without the skip, backward
        # would have produced zero gradients and AdamW would still apply momentum and
        # weight decay; give it those zeros so the update is identical.
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    params = [p for p in model.parameters() if p.grad is not None]
    norm = 0.0
    if params:
        limit = max_grad_norm if max_grad_norm > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        return norm, False
    optimizer.step()
    return norm, True
