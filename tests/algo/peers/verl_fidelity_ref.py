"""Transcription of verl's step as it stands today, for the issue-43 equality tests only.

Source: verl-project/verl (formerly volcengine/verl; Apache License 2.0, Copyright 2024-2026
Bytedance Ltd. and/or its affiliates) at 1dda039b9c6311889a9c9a26040677e1254814f9
(2026-08-22):
- verl/trainer/ppo/core_algos.py: `agg_loss` (with the global-batch arguments; dp_size 1),
  `compute_grpo_outcome_advantage`, `compute_policy_loss_vanilla`,
  `compute_policy_loss_geo_mean` (with `rollout_is_weights`), `compute_policy_loss_dppo_tv`,
  `kl_penalty_forward` ("low_var_kl");
- verl/trainer/ppo/rollout_corr_helper.py: `compute_rollout_correction_weights` (token /
  sequence, TIS or IcePop "lower_upper"); `compute_rollout_rejection_mask` is unchanged
  since b178a3cd (the same function body) and is taken from verl_rollout_corr_ref.py;
- verl/workers/utils/losses.py: `ppo_loss` (policy loss + entropy bonus + KL loss, each
  through `agg_loss` with the batch's `response_mask`);
- verl/trainer/ppo/ray_trainer.py (`fit`): the order of one step: the rollout correction
  (IS weights on the mask as sampled, rejection by *editing* `response_mask`) runs before
  `compute_advantage`, and the actor's loss reads the edited mask.

The config objects become keyword arguments (verl's defaults), metrics are left out.
Nothing in rlvr imports this file.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from peers.verl_rollout_corr_ref import compute_rollout_rejection_mask

SAFETY_BOUND = 20.0


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def agg_loss(
    loss_mat,
    loss_mask,
    loss_agg_mode,
    dp_size=1,
    batch_num_tokens=None,
    global_batch_size=None,
    loss_scale_factor=None,
):
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
        loss = masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    elif loss_agg_mode == "token-sum":
        loss = masked_sum(loss_mat, loss_mask) * dp_size
    elif loss_agg_mode in ["seq-mean-token-sum", "seq-mean-token-sum-norm"]:
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # token-sum
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()  # exclude fully masked sequences
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean
        if loss_agg_mode == "seq-mean-token-sum-norm":
            if loss_scale_factor is None:
                horizon = loss_mask.shape[-1]
                loss_scale_factor = horizon
            loss /= loss_scale_factor
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_mask = torch.sum(loss_mask, dim=-1)  # per-sequence token count
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)  # token-mean
        seq_mask = (seq_mask > 0).float()  # exclude fully masked sequences
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")
    return loss


def compute_grpo_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True
):
    scores = token_level_rewards.sum(dim=-1)
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                scores_tensor = torch.stack(id2score[idx])
                id2mean[idx] = torch.mean(scores_tensor)
                id2std[idx] = torch.std(scores_tensor)
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        for i in range(bsz):
            if norm_adv_by_std_in_grpo:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
            else:
                scores[i] = scores[i] - id2mean[index[i]]
        scores = scores.unsqueeze(-1) * response_mask
    return scores, scores


def compute_policy_loss_vanilla(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    loss_agg_mode="token-mean",
    clip_ratio=0.2,
    clip_ratio_c=3.0,
    rollout_is_weights=None,
    **global_batch_info,
):
    cliprange_low = cliprange_high = clip_ratio
    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **global_batch_info)


def compute_policy_loss_geo_mean(
    old_log_prob, log_prob, advantages, response_mask, clip_ratio=0.4, rollout_is_weights=None
):
    cliprange_low = cliprange_high = clip_ratio
    negative_approx_kl = log_prob - old_log_prob
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -cliprange_low, cliprange_high)
    negative_approx_kl_min = torch.min(
        sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp
    )
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min
    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp(
        (negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    )
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    pg_losses = -advantage * ratio
    if rollout_is_weights is not None:
        seq_is_weights = torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1)
            / (response_mask_sum + 1e-8)
        )
        pg_losses = pg_losses * seq_is_weights
    return torch.mean(pg_losses)


def compute_policy_loss_dppo_tv(
    old_log_prob, log_prob, advantages, response_mask, clip_ratio=0.15, clip_ratio_c=20.0
):
    clip_divergence_low = clip_divergence_high = clip_ratio
    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    truncated_ratio = torch.clamp(ratio, max=clip_ratio_c)
    truncated_ratio = truncated_ratio.detach()
    prob = torch.exp(log_prob)
    old_prob = torch.exp(old_log_prob)
    valid_positive_mask = (prob - old_prob) <= clip_divergence_high
    valid_negative_mask = (prob - old_prob) >= -clip_divergence_low
    valid_mask = torch.where(advantages > 0, valid_positive_mask, valid_negative_mask)
    valid_mask = valid_mask.detach().float()
    pg_losses = -advantages * truncated_ratio * log_prob * valid_mask
    return agg_loss(pg_losses, response_mask, "token-mean")


def kl_low_var(logprob, ref_logprob):
    """`kl_penalty_forward(..., "low_var_kl")`."""
    kl = ref_logprob - logprob
    kl = torch.clamp(kl, min=-20, max=20)
    ratio = torch.exp(kl)
    kld = (ratio - kl - 1).contiguous()
    return torch.clamp(kld, min=-10, max=10)


def compute_rollout_correction_weights(log_ratio, response_mask, rollout_is, threshold):
    """Token / sequence IS weights: TIS for a single upper bound, IcePop for "lower_upper"."""
    if isinstance(threshold, str) and "_" in threshold:
        lower, upper = (float(x) for x in threshold.split("_", 1))
    else:
        lower, upper = None, float(threshold)
    if rollout_is == "token":
        log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        raw = torch.exp(log_ratio_safe)
    elif rollout_is == "sequence":
        log_ratio_sum = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        raw = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    else:
        raise ValueError(rollout_is)
    raw = raw * response_mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        kept = (raw >= lower) & (raw <= upper)
        weights = torch.where(kept, raw, torch.zeros_like(raw))
    return weights.detach()


def last_token_rewards(scores, response_mask):
    """token_level_rewards: each response's score on its last token (the reward manager's
    placement); `compute_grpo_outcome_advantage` only reads its sum."""
    rewards = torch.zeros_like(response_mask)
    last = response_mask.sum(-1).long() - 1
    rewards[torch.arange(len(scores)), last] = scores
    return rewards


def ppo_step(
    log_prob,
    old_log_prob,
    rollout_log_prob,
    ref_log_prob,
    entropy,
    scores,
    index,
    response_mask,
    loss_agg_mode="token-mean",
    rollout_is=None,
    rollout_is_threshold=2.0,
    rollout_rs=(),
    kl_loss_coef=0.0,
    entropy_coeff=0.0,
    clip_ratio=0.2,
    loss_mode="vanilla",
    norm_adv_by_std_in_grpo=True,
    loss_scale_factor=None,
):
    """One step in verl's order: rollout correction (IS weights on the mask as sampled;
    each `rollout_rs` (option, threshold) edits `response_mask`) → GRPO advantages on the
    edited mask → `ppo_loss` on the edited mask (one micro-batch, dp 1)."""
    log_ratio = old_log_prob - rollout_log_prob
    weights = None
    if rollout_is is not None:
        weights = compute_rollout_correction_weights(
            log_ratio, response_mask, rollout_is, rollout_is_threshold
        )
    mask = response_mask.clone()
    for option, threshold in rollout_rs:
        mask = mask * compute_rollout_rejection_mask(log_ratio, response_mask, option, threshold)
    rewards = last_token_rewards(scores, response_mask)
    advantages, _ = compute_grpo_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo
    )
    if loss_mode == "geo_mean":
        pg_loss = compute_policy_loss_geo_mean(
            old_log_prob, log_prob, advantages, mask, clip_ratio, weights
        )
    else:
        pg_loss = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            advantages,
            mask,
            loss_agg_mode,
            clip_ratio,
            3.0,
            weights,
            loss_scale_factor=loss_scale_factor,
        )
    policy_loss = pg_loss
    if entropy_coeff:
        policy_loss = policy_loss - entropy_coeff * agg_loss(entropy, mask, loss_agg_mode)
    if kl_loss_coef:
        kld = kl_low_var(log_prob, ref_log_prob)
        policy_loss = policy_loss + agg_loss(kld, mask, loss_agg_mode) * kl_loss_coef
    return policy_loss
