"""The policy loss of one micro-batch: ratio → surrogate → (TIS) → aggregation, plus the
recipe's regularizers. Linear in the rows, so micro-batch losses sum to the batch loss."""

from __future__ import annotations

import warnings

import torch

from rlvr.algo.aggregation import aggregate
from rlvr.algo.recipes import Recipe
from rlvr.algo.registry import KL_ESTIMATORS, RATIOS, SURROGATES
from rlvr.algo.regularizers import importance_corrected
from rlvr.algo.rollout_correction import (
    ROLLOUT_CORRECTIONS,
    divergence_rejection_mask,
    mismatch_sums,
    offpolicy_sequence_mask,
)
from rlvr.algo.step_stats import StepStats
from rlvr.algo.token_selection import top_entropy_mask


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
) -> tuple[torch.Tensor, StepStats]:
    """L = Σ w·ℓ(ρ, Â) [·TIS] + β·Σ w·k + μ·Σ w_nll·(−logπ) − c_H·Σ w·H, all (N, T) inputs.

    The composition layer: it picks the recipe's ratio, surrogate and KL estimator and
    applies them with the aggregation weights it is *given* (computed from global counts
    by `step_weights`); no term can change the aggregation. Every term it calls is a pure
    function of tensors and scalars. `entropy_coef`: this step's c_H when the caller holds
    an adaptive controller (rlvr/algo/entropy_control.py); None: the recipe's.
    """
    ratio, out, per_token = _policy_terms(
        recipe, logprobs, old_logprobs, advantages, response_mask, sampler_logprobs, entropy
    )
    stats = StepStats()
    loss = aggregate(per_token, loss_weights)
    stats.add("loss/policy", loss.detach())
    if recipe.needs_reference and not recipe.kl_in_reward:
        if ref_logprobs is None:
            raise ValueError(f"kl={recipe.kl!r} in the loss needs ref_logprobs")
        per_token_kl = KL_ESTIMATORS.get(recipe.kl).fn(logprobs, ref_logprobs)
        if recipe.kl_ratio_correction:
            # π/π_old per token (TRL), whatever ratio or anchor the policy term uses
            token = RATIOS.get("token").fn(logprobs, old_logprobs, response_mask)
            per_token_kl = importance_corrected(per_token_kl, token)
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
        _mismatch_stats(stats, recipe, old_logprobs, sampler_logprobs, response_mask)
    moving = gradient_tokens(
        recipe,
        logprobs,
        old_logprobs,
        advantages,
        loss_weights,
        response_mask,
        sampler_logprobs,
        entropy,
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
) -> torch.Tensor:
    """(N, T) bool: response tokens t with ∂(Σ w·ℓ·TIS)/∂logπ_t ≠ 0, i.e. the tokens the
    policy term of the update moves. Recomputed on a detached copy of `logprobs` (the
    surrogate alone, no model forward), so clipping that zeroes a gradient (PPO's clipped
    branch, GSPO's clipped sequences) shows as False and CISPO's clipped weight does not.
    """
    leaf = logprobs.detach().requires_grad_(True)
    with torch.enable_grad():
        _, _, per_token = _policy_terms(
            recipe, leaf, old_logprobs, advantages, response_mask, sampler_logprobs, entropy
        )
        (grad,) = torch.autograd.grad(aggregate(per_token, loss_weights), leaf, allow_unused=True)
    if grad is None:
        return torch.zeros_like(response_mask, dtype=torch.bool)
    return (grad != 0) & (response_mask > 0)


def _policy_terms(
    recipe, logprobs, old_logprobs, advantages, response_mask, sampler_logprobs, entropy=None
):
    """The recipe's ratio ρ, its surrogate's output and the per-token policy loss
    ℓ(ρ, Â)·TIS·E (TIS only with a cap and sampler log-probs; E the top-entropy tokens)."""
    ratio_choice = RATIOS.get(recipe.ratio)
    ratio = ratio_choice.fn(
        logprobs, _anchor(recipe, old_logprobs, sampler_logprobs), response_mask
    )
    surrogate = SURROGATES.get(recipe.surrogate)
    extra = {"response_mask": response_mask} if surrogate.needs_mask else {}
    out = surrogate.fn(ratio, advantages, logprobs, recipe.params, **extra)
    per_token = out.loss * _entropy_selection(recipe, entropy, response_mask)
    correction = _rollout_correction(
        recipe, logprobs, old_logprobs, advantages, response_mask, sampler_logprobs
    )
    if correction is not None:
        per_token = per_token * correction
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


def _rollout_correction(recipe, logprobs, old_logprobs, advantages, response_mask, sampler):
    """The product of the recipe's rollout-correction weight, divergence rejection and
    off-policy sequence mask (rlvr/algo/rollout_correction.py), or None when none is on.
    Without sampler log-probs only the off-policy mask applies, against π_old (as TRL)."""
    choice, lower, upper = recipe.correction
    weight = None
    if sampler is not None and choice is not None:
        weight = ROLLOUT_CORRECTIONS.get(choice).fn(
            old_logprobs, sampler, response_mask, lower, upper
        )
    if sampler is not None and recipe.rc_reject is not None:
        reject = divergence_rejection_mask(
            old_logprobs, sampler, response_mask, recipe.rc_reject, recipe.rc_reject_max
        )
        weight = reject if weight is None else weight * reject
    if recipe.offpolicy_mask_delta is not None:
        behaviour = old_logprobs if sampler is None else sampler
        keep = offpolicy_sequence_mask(
            logprobs, behaviour, advantages, response_mask, recipe.offpolicy_mask_delta
        )
        weight = keep if weight is None else weight * keep
    return weight


def _entropy_selection(recipe: Recipe, entropy, response_mask) -> torch.Tensor | float:
    """1 everywhere, or with top_entropy_quantile ρ < 1 the 0/1 mask of the top-ρ entropy
    tokens (rlvr/algo/token_selection.py), which alone keep a policy gradient."""
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
