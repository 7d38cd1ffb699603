"""The policy loss of one micro-batch: ratio → surrogate → (TIS) → aggregation, plus the
recipe's regularizers. Linear in the rows, so micro-batch losses sum to the batch loss."""

from __future__ import annotations

import warnings

import torch

from rlvr.algo.policy.aggregation import aggregate
from rlvr.algo.policy.rollout_correction import (
    ROLLOUT_CORRECTIONS,
    geometric_fold,
    mismatch_sums,
    offpolicy_sequence_mask,
)
from rlvr.algo.policy.token_selection import top_entropy_mask
from rlvr.algo.recipes import Recipe
from rlvr.algo.registry import KL_ESTIMATORS, RATIOS, SURROGATES
from rlvr.algo.regularizers import importance_corrected
from rlvr.algo.step_stats import StepStats


def policy_loss(
    recipe: Recipe,
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_weights: torch.Tensor,
    response_mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    sampler_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    nll_weights: torch.Tensor | None = None,
    entropy_coef: float | None = None,
    sampled_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, StepStats]:
    """L = Σ w·ℓ(ρ, Â) [·TIS] + β·Σ w·k + μ·Σ w_nll·(−logπ) − c_H·Σ w·H, all (N, T) inputs.

    The composition layer: it picks the recipe's ratio, surrogate and KL estimator and
    applies them with the aggregation weights it is *given* (computed from global counts
    by `step_weights`); no term can change the aggregation. Every term it calls is a pure
    function of tensors and scalars. `entropy_coef`: this step's c_H when the caller holds
    an adaptive controller (rlvr/algo/entropy_control.py); None: the recipe's.
    Rejection (`<level>_rs`, `rc_reject`) is not applied here: `prepare_batch` removes
    the rejected tokens from `response_mask` and the weights before any term sees them.
    `sampled_mask`: the tokens before rejection (`PreparedBatch.sampled_mask`; default
    `response_mask`), over which a correction's weights and the mismatch metrics are
    measured, as verl measures them on the mask before its rejection.
    """
    sampled_mask = response_mask if sampled_mask is None else sampled_mask
    sampler = (sampler_logprobs, sampled_mask)
    ratio, out, per_token = _policy_terms(
        recipe, logprobs, old_logprobs, advantages, response_mask, sampler, entropy
    )
    stats = StepStats()
    loss = aggregate(per_token, loss_weights)
    stats.add("loss/policy", loss.detach())
    if recipe.needs_reference and not recipe.kl_in_reward:
        if ref_logprobs is None:
            raise ValueError(f"kl={recipe.kl!r} in the loss needs ref_logprobs")
        per_token_kl = KL_ESTIMATORS.get(recipe.kl).fn(logprobs, ref_logprobs)
        if recipe.kl_ratio_correction:
            per_token_kl = importance_corrected(
                per_token_kl, _kl_correction_ratio(recipe, logprobs, old_logprobs, response_mask)
            )
        kl = aggregate(per_token_kl, loss_weights)
        loss = loss + recipe.kl_coef * kl
        stats.add("loss/kl", kl.detach())
    entropy_coef = recipe.entropy_coef if entropy_coef is None else entropy_coef
    if entropy_coef and entropy is not None:
        # With an entropy quantile the bonus acts on the same tokens as the policy term (TRL).
        ent = aggregate(entropy, loss_weights * _entropy_selection(recipe, entropy, response_mask))
        loss = loss - entropy_coef * ent
        stats.add("loss/entropy", ent.detach())
    if recipe.nll_coef and nll_weights is not None:
        nll = aggregate(-logprobs, nll_weights)
        loss = loss + recipe.nll_coef * nll
        stats.add("loss/nll", nll.detach())
    _clip_stats(stats, ratio.detach(), advantages, response_mask, out, recipe)
    if sampler_logprobs is not None:
        _mismatch_stats(stats, recipe, old_logprobs, sampler_logprobs, sampled_mask)
    moving = gradient_tokens(
        recipe,
        logprobs,
        old_logprobs,
        advantages,
        loss_weights,
        response_mask,
        sampler_logprobs,
        entropy,
        sampled_mask=sampled_mask,
    )
    valid = response_mask > 0
    stats.add_ratio("grad/token_frac", moving.sum(), valid.sum())
    active = valid & (advantages != 0)
    stats.add_ratio("grad/active_token_frac", (moving & active).sum(), active.sum())
    return loss, stats


def gradient_tokens(
    recipe: Recipe,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_weights: torch.Tensor,
    response_mask: torch.Tensor,
    sampler_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    *,
    sampled_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N, T) bool: response tokens t with ∂(Σ w·ℓ·TIS)/∂logπ_t ≠ 0, i.e. the tokens the
    policy term of the update moves. Recomputed on a detached copy of `logprobs` (the
    surrogate alone, no model forward), so clipping that zeroes a gradient (PPO's clipped
    branch, GSPO's clipped sequences) shows as False and CISPO's clipped weight does not.
    """
    leaf = logprobs.detach().requires_grad_(True)
    with torch.enable_grad():
        sampler = (sampler_logprobs, response_mask if sampled_mask is None else sampled_mask)
        _, _, per_token = _policy_terms(
            recipe, leaf, old_logprobs, advantages, response_mask, sampler, entropy
        )
        (grad,) = torch.autograd.grad(aggregate(per_token, loss_weights), leaf, allow_unused=True)
    if grad is None:
        return torch.zeros_like(response_mask, dtype=torch.bool)
    return (grad != 0) & (response_mask > 0)


def _policy_terms(recipe, logprobs, old_logprobs, advantages, response_mask, sampler, entropy):
    """The recipe's ratio ρ, its surrogate's output and the per-token policy loss
    ℓ(ρ, Â)·w·E·K: w the rollout-correction weight (with sampler log-probs), E the
    top-entropy tokens, K the off-policy sequence mask. A `sequence_mean` surrogate (GMPO)
    takes E inside its mean instead, and w folded to one weight per response (verl).
    `sampler`: (the sampler's log-probs or None, the tokens before rejection)."""
    sampler_logprobs = sampler[0]
    anchor = _anchor(recipe, old_logprobs, sampler_logprobs)
    ratio = RATIOS.get(recipe.ratio).fn(logprobs, anchor, response_mask)
    surrogate = SURROGATES.get(recipe.surrogate)
    selection = _entropy_selection(recipe, entropy, response_mask)
    extra = {}
    if surrogate.needs_mask:
        extra["response_mask"] = response_mask
    if surrogate.sequence_mean:
        extra["mean_mask"] = response_mask * selection
    if surrogate.needs_anchor:
        extra["anchor_logprobs"] = anchor
    out = surrogate.fn(ratio, advantages, logprobs, recipe.params, **extra)
    per_token = out.loss if surrogate.sequence_mean else out.loss * selection
    weight = _correction_weight(
        recipe, old_logprobs, response_mask, sampler, surrogate.sequence_mean
    )
    if weight is not None:
        per_token = per_token * weight
    if recipe.offpolicy_mask_delta is not None:
        # Without sampler log-probs the mask measures against π_old (as TRL).
        behaviour = old_logprobs if sampler_logprobs is None else sampler_logprobs
        per_token = per_token * offpolicy_sequence_mask(
            logprobs, behaviour, advantages, response_mask, recipe.offpolicy_mask_delta
        )
    return ratio, out, per_token


def _anchor(recipe: Recipe, old_logprobs, sampler_logprobs) -> torch.Tensor:
    """The ratio's denominator: π_old, or the sampler's log-probs where the recipe anchors
    there (DPPO as TRL); without them it falls back to π_old, with a warning."""
    if recipe.ratio_anchor != "sampler":
        return old_logprobs
    if sampler_logprobs is None:
        warnings.warn(
            "dppo_anchor='sampler' but no sampler log-probs were given: the trust region is "
            "measured against π_old (set dppo_anchor='old' to silence this)",
            stacklevel=4,
        )
        return old_logprobs
    return sampler_logprobs


def _correction_weight(recipe, old_logprobs, response_mask, sampler, fold: bool):
    """The recipe's rollout-correction weight (rlvr/algo/policy/rollout_correction.py) on the
    trained tokens, or None when it has none, no sampler log-probs are given, or it is a
    rejection (applied to the mask by `prepare_batch`). Measured over the tokens before
    rejection (a sequence weight Π_t ρ_t is the sampled response's, as verl's);
    `fold`: token weights become one geometric-mean weight per response over the trained
    tokens (`geometric_fold`, as verl's geo_mean loss folds them)."""
    choice, lower, upper = recipe.correction
    sampler_logprobs, sampled_mask = sampler
    if sampler_logprobs is None or choice is None:
        return None
    entry = ROLLOUT_CORRECTIONS.get(choice)
    if entry.rejects:
        return None
    weight = entry.fn(old_logprobs, sampler_logprobs, sampled_mask, lower, upper) * response_mask
    if fold and entry.level == "token":
        weight = geometric_fold(weight, response_mask)
    return weight


def _kl_correction_ratio(recipe: Recipe, logprobs, old_logprobs, response_mask):
    """The ratio `kl_ratio_correction` weighs the KL by: TRL's `coef_1` at the recipe's
    level, i.e. the recipe's own ratio s_i (anchored at π_old, gradient through its mean)
    when it is sequence-level (GSPO), else π/π_old per token, whatever the anchor or
    prefix the policy term uses (MinPRO's prefix minimum, DPPO's sampler)."""
    level = recipe.ratio if RATIOS.get(recipe.ratio).sequence_level else "token"
    return RATIOS.get(level).fn(logprobs, old_logprobs, response_mask)


def _entropy_selection(recipe: Recipe, entropy, response_mask) -> torch.Tensor | float:
    """1 everywhere, or with top_entropy_quantile ρ < 1 the 0/1 mask of the top-ρ entropy
    tokens (rlvr/algo/policy/token_selection.py): the factor E of the per-token loss, or, for a
    `sequence_mean` surrogate, the tokens of its mean (docs/algorithms.md §3)."""
    if recipe.top_entropy_quantile >= 1.0:
        return 1.0
    if entropy is None:
        raise ValueError(
            f"top_entropy_quantile={recipe.top_entropy_quantile} selects tokens by their "
            "entropy, but no per-token entropy was given (the trainer computes it when "
            "log_entropy is on; rlvr audit has no logits to compute it from)"
        )
    return top_entropy_mask(entropy, response_mask, recipe.top_entropy_quantile).to(entropy.dtype)


MISMATCH_MAX = "rollout/mismatch_max_abs_log_ratio"
"""A maximum, not a sum: one call's value is exact; `policy_update` takes the max over
micro-batches and ranks."""


def _mismatch_stats(stats: StepStats, recipe: Recipe, old_logprobs, sampler, mask) -> None:
    """rollout/mismatch_* from the tensors the loss uses, whether or not a correction is on;
    the band is the correction's, (1/rc_upper, rc_upper) when it has no lower bound."""
    choice, lower, upper = recipe.correction
    level = "token" if choice is None else choice.rpartition("_")[0]
    if level not in ("token", "sequence", "geometric"):  # a user's module:function
        level = "token"
    if lower is None and upper is not None:
        lower = 1.0 / upper
    sums, largest = mismatch_sums(old_logprobs, sampler, mask, level, lower, upper)
    for name, (num, den) in sums.items():
        stats.add_ratio(f"rollout/mismatch_{name}", num, den)
    stats.add(MISMATCH_MAX, largest)


def _clip_stats(stats: StepStats, ratio, advantages, mask, out, recipe: Recipe) -> None:
    """Clip fractions over tokens with a non-zero advantage (responses for sequence ratios)."""
    valid = mask > 0
    active = valid & (advantages != 0)
    stats.add_ratio("clip/ratio_mean", ratio[valid].sum(), valid.sum())
    stats.add_ratio("clip/ratio_abs_dev", (ratio[valid] - 1).abs().sum(), valid.sum())
    stats.add_ratio("clip/low_frac", (out.clipped_low & active).sum(), active.sum())
    stats.add_ratio("clip/high_frac", (out.clipped_high & active).sum(), active.sum())
    either = (out.clipped_low | out.clipped_high) & active
    stats.add_ratio("clip/frac", either.sum(), active.sum())
    if RATIOS.get(recipe.ratio).sequence_level:
        seq_active = active.any(-1)
        seq_clipped = either.any(-1) & seq_active
        stats.add_ratio("clip/seq_frac", seq_clipped.sum(), seq_active.sum())
