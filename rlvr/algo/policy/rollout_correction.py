"""Rollout correction: weights for the gap between the sampler and the trainer's π_old
(docs/19-rollout-correction.md; formulas and sources in docs/algorithms.md §2b).

The sampler's log-probs differ from the trainer's (another kernel, bf16, an older policy
under asynchronous sampling), so a batch is not quite on-policy. With
log ρ_{i,t} = log π_old(y_t|·) − log π_sampler(y_t|·), a correction multiplies the
per-token loss by a weight without gradient:

    level      token: ρ_t   sequence: Π_t ρ_t   geometric: (Π_t ρ_t)^(1/|y|)
    mode       tis: clamp(ρ, lower, upper)   mis: ρ·1[lower ≤ ρ ≤ upper]   rs: 1[lower ≤ ρ ≤ upper]

`<level>_<mode>` is a registered choice (`rollout_correction` in a recipe). A `tis`/`mis`
weight multiplies the per-token loss; an `rs` choice, and rejection by a divergence
statistic (verl's `rollout_rs` k2/k3), are *rejections*: as verl does, the batch's
response mask loses the rejected tokens before advantages and aggregation (rlvr/algo/
objective.py), so they leave every normaliser, the KL and the entropy terms.
DeepSeek-V3.2's off-policy sequence mask multiplies the loss. Log-weights are clamped to
±20 before exp, as verl does. Every function is pure: tensors and scalars in, an (N, T)
tensor out, 0 on padding, detached.
"""

from __future__ import annotations

import functools

import torch

from rlvr.algo.registry import Registry

MAX_LOG_WEIGHT = 20.0
LEVELS = ("token", "sequence", "geometric")
# level: what one weight covers ("token": each token its own; a user's function is taken
# as token weights); rejects: a 0/1 rejection that edits the mask instead of weighing.
ROLLOUT_CORRECTIONS = Registry("rollout_correction", level="token", rejects=False)
REJECT_STATISTICS = tuple(
    f"{agg}_{k}" for agg in ("token", "seq_sum", "seq_mean", "seq_max") for k in ("k2", "k3")
)


def log_importance(
    old_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
) -> torch.Tensor:
    """log w (N, T) at `level`: token Δ_t, sequence Σ_t Δ_t, geometric (1/|y|) Σ_t Δ_t,
    Δ = log π_old − log π_sampler; sequence levels are broadcast over the response."""
    delta = (old_logprobs - sampler_logprobs).detach() * response_mask
    if level == "token":
        out = delta
    elif level == "sequence":
        out = delta.sum(-1, keepdim=True)
    elif level == "geometric":
        out = delta.sum(-1, keepdim=True) / response_mask.sum(-1, keepdim=True).clamp(min=1)
    else:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    return out.clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT).expand_as(old_logprobs)


def in_band(weight: torch.Tensor, lower: float | None, upper: float | None) -> torch.Tensor:
    """1[lower ≤ w ≤ upper] (bool); a bound of None is no bound."""
    inside = torch.ones_like(weight, dtype=torch.bool)
    if lower is not None:
        inside &= weight >= lower
    if upper is not None:
        inside &= weight <= upper
    return inside


def truncated_weight(old_logprobs, sampler_logprobs, response_mask, lower, upper, *, level):
    """TIS (Yao 2025, "Your efficient RL framework secretly brings you off-policy RL
    training"; Ionides 2008 truncated IS): w = clamp(ρ, lower, upper)."""
    weight = log_importance(old_logprobs, sampler_logprobs, response_mask, level).exp()
    if lower is not None or upper is not None:
        weight = weight.clamp(min=lower, max=upper)
    return weight * response_mask


def masked_weight(old_logprobs, sampler_logprobs, response_mask, lower, upper, *, level):
    """MIS / IcePop (Ling Team 2025, arXiv 2510.18855): w = ρ·1[lower ≤ ρ ≤ upper]: a
    ratio outside the band drops its token (or response) instead of being clipped."""
    weight = log_importance(old_logprobs, sampler_logprobs, response_mask, level).exp()
    return torch.where(in_band(weight, lower, upper), weight, 0.0) * response_mask


def rejection_weight(old_logprobs, sampler_logprobs, response_mask, lower, upper, *, level):
    """Rejection sampling (verl's k1 `rollout_rs`; Geo-RS at the geometric level):
    w = 1[lower ≤ ρ ≤ upper], no reweighting inside the band."""
    weight = log_importance(old_logprobs, sampler_logprobs, response_mask, level).exp()
    return in_band(weight, lower, upper).to(response_mask.dtype) * response_mask


for _level in LEVELS:
    for _mode, _fn in (("tis", truncated_weight), ("mis", masked_weight), ("rs", rejection_weight)):
        ROLLOUT_CORRECTIONS.register(
            f"{_level}_{_mode}",
            functools.partial(_fn, level=_level),
            level=_level,
            rejects=_mode == "rs",
        )

FOLD_EPS = 1e-10


def geometric_fold(weight: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One weight per response from token weights, for a loss that is one value per
    response (GMPO): w_i = exp((1/|y_i|) Σ_t m_t·log(w_t + 1e-10)), broadcast over its
    tokens, 0 on padding. verl's `compute_policy_loss_geo_mean` folds `rollout_is_weights`
    so (verl-project/verl @ 1dda039b, verl/trainer/ppo/core_algos.py), dividing by
    |y_i| + 1e-8 where rlvr divides by max(|y_i|, 1): equal to 1e-8 relative."""
    log_weight = torch.log(weight.detach() + FOLD_EPS) * response_mask
    lengths = response_mask.sum(-1, keepdim=True).clamp(min=1)
    return (log_weight.sum(-1, keepdim=True) / lengths).exp().expand_as(weight) * response_mask


def divergence_rejection_mask(
    old_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    statistic: str,
    threshold: float,
) -> torch.Tensor:
    """verl's divergence rejection (`rollout_rs` k2/k3; Liu & Li 2025, "When Speed Kills
    Stability"): keep a token, or a whole response, while its statistic ≤ threshold.

    k2 = ½(log ρ)², k3 = ρ − 1 − log ρ per token; `token_*` tests each token,
    `seq_sum_*`/`seq_mean_*`/`seq_max_*` the sum/mean/max over the response. (N, T) {0, 1}.
    """
    agg, _, k = statistic.rpartition("_")
    if statistic not in REJECT_STATISTICS:
        raise ValueError(
            f"rc_reject must be one of {', '.join(REJECT_STATISTICS)}, got {statistic!r}"
        )
    log_ratio = (old_logprobs - sampler_logprobs).detach().clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)
    per_token = 0.5 * log_ratio**2 if k == "k2" else log_ratio.exp() - 1 - log_ratio
    per_token = per_token * response_mask
    if agg == "token":
        value = per_token
    elif agg == "seq_sum":
        value = per_token.sum(-1, keepdim=True)
    elif agg == "seq_mean":
        value = per_token.sum(-1, keepdim=True) / response_mask.sum(-1, keepdim=True).clamp(min=1)
    else:  # seq_max; every statistic is ≥ 0, so the padding's 0 never wins over a token
        value = per_token.amax(-1, keepdim=True)
    return (value <= threshold).to(response_mask.dtype).expand_as(response_mask) * response_mask


def offpolicy_sequence_mask(
    logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    delta: float,
) -> torch.Tensor:
    """DeepSeek-V3.2 off-policy sequence mask (arXiv 2512.02556, Eq. 9): drop a response
    whose Â < 0 when (1/|y|) Σ_t (log π_sampler − log π_θ) > δ; π_θ is the policy being
    trained (detached), so the mask follows the policy through the minibatches.

    Differs from the paper only in that Â is per token: with a per-response Â (GRPO) it is
    the paper's mask; with token advantages (GAE) a token is kept when its own Â_t ≥ 0."""
    divergence = (sampler_logprobs - logprobs.detach()) * response_mask
    mean = divergence.sum(-1, keepdim=True) / response_mask.sum(-1, keepdim=True).clamp(min=1)
    keep = (advantages >= 0) | (mean <= delta)
    return keep.to(response_mask.dtype) * response_mask


def mismatch_sums(
    old_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    level: str = "token",
    lower: float | None = 0.5,
    upper: float | None = 2.0,
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """How far the sampler is from π_old on the sampled tokens, as (numerator, denominator)
    pairs that add up over micro-batches, and the largest |log ρ_t| (docs/metrics.md):

    k1 = mean_t(log π_sampler − log π_old), k3 = mean_t(ρ_t − 1 − log ρ_t) (both estimate
    KL(sampler‖π_old)); seq_k1 = mean_i Σ_t (log π_sampler − log π_old); frac_outside_band:
    share of tokens (token level) or responses (sequence levels) whose weight at `level`
    lies outside [lower, upper]."""
    mask = response_mask.double()
    # float64 and expm1: k3 of a 1e-7 gap is ~1e-14, below float32's rounding of e^x − 1
    log_ratio = (old_logprobs - sampler_logprobs).detach().double() * mask
    tokens = mask.sum()
    rows = mask.sum(-1) > 0
    k3 = (torch.expm1(log_ratio.clamp(max=MAX_LOG_WEIGHT)) - log_ratio) * mask
    weight = log_importance(old_logprobs, sampler_logprobs, mask, level).exp()
    outside = ~in_band(weight, lower, upper)
    if level == "token":
        outside_frac = ((outside & (mask > 0)).sum(), tokens)
    else:
        outside_frac = ((outside[:, 0] & rows).sum(), rows.sum())
    sums = {
        "k1": (-log_ratio.sum(), tokens),
        "k3": (k3.sum(), tokens),
        "seq_k1": (-log_ratio.sum(-1)[rows].sum(), rows.sum()),
        "frac_outside_band": outside_frac,
    }
    return sums, log_ratio.abs().max() if log_ratio.numel() else log_ratio.new_zeros(())
