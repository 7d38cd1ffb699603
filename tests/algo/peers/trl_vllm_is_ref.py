"""Transcription of TRL's vLLM importance-sampling correction and off-policy sequence mask,
for equality tests only.

Source: huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 (2026-07-24),
trl/trainer/grpo_trainer.py (Apache License 2.0, Copyright 2020-2026 The HuggingFace
Team): the `vllm_importance_sampling_ratio` block of `_generate_and_score_completions`,
its `sampling/sampling_logp_difference` metrics, `get_off_policy_mask`, and the
`loss_type="dapo"` clipped loss of `_compute_loss` with the off-policy mask and the IS
ratio applied. `self.*` become keyword arguments (TRL's defaults: sequence_mask, clip_max
3.0, clip_min None); the accelerator's gather and the gradient-accumulation normalizer
are left out (one process, one micro-batch). Nothing in rlvr imports this file.
"""

from __future__ import annotations

import math

import torch


def vllm_importance_sampling_ratio(
    old_per_token_logps,
    sampling_per_token_logps,
    completion_mask,
    mode="sequence_mask",
    clip_min=None,
    clip_max=3.0,
):
    """(B, T) for token_* modes, (B, 1) for sequence_* modes."""
    mask = completion_mask
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
    sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
        logps_diff = per_sequence_logps_diff
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    elif mode in ["sequence_mask", "token_mask"]:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        invalid_mis_mask = (ratio < min_val) | (ratio > max_val)
        ratio = ratio.masked_fill(invalid_mis_mask, value=0.0)
    else:
        raise ValueError(f"Unknown vLLM importance sampling level: {mode}.")
    return ratio


def sampling_logp_difference(old_per_token_logps, sampling_per_token_logps, completion_mask):
    """(mean, max) of |old − sampling| over the completion tokens."""
    delta = torch.abs(old_per_token_logps - sampling_per_token_logps)
    delta = delta[completion_mask.bool()]
    return torch.mean(delta), torch.max(delta)


def get_off_policy_mask(
    advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold
):
    kl_div = sampling_per_token_logps - per_token_logps.detach()
    seq_kl_sum = (kl_div * mask).sum(dim=1, keepdim=True)
    avg_seq_kl = seq_kl_sum / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    is_pos_adv = advantages >= 0
    is_low_kl = avg_seq_kl <= off_policy_threshold
    return (is_pos_adv | is_low_kl).to(dtype=mask.dtype)  # (B, 1)


def dapo_loss(
    per_token_logps,
    old_per_token_logps,
    advantages,
    mask,
    importance_sampling_ratio=None,
    sampling_per_token_logps=None,
    off_policy_mask_threshold=None,
    epsilon_low=0.2,
    epsilon_high=0.2,
):
    """`_compute_loss` with loss_type "dapo", token-level ratios, beta 0; advantages (B,)."""
    advantages = advantages.unsqueeze(1)
    if off_policy_mask_threshold is not None:
        sampling = (
            old_per_token_logps if sampling_per_token_logps is None else sampling_per_token_logps
        )
        off_policy_mask = get_off_policy_mask(
            advantages, per_token_logps, sampling, mask, off_policy_mask_threshold
        )
    log_ratio = per_token_logps - old_per_token_logps
    coef_1 = torch.exp(log_ratio)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss1 = coef_1 * advantages
    per_token_loss2 = coef_2 * advantages
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    if off_policy_mask_threshold is not None:
        per_token_loss = per_token_loss * off_policy_mask
    if importance_sampling_ratio is not None:
        per_token_loss = per_token_loss * importance_sampling_ratio
    # num_items_in_batch: the batch's completion tokens
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
