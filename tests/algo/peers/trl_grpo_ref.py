"""Transcription of TRL's GRPO loss pieces, for equality tests only.

Source: huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 (2026-07-24):
trl/trainer/grpo_trainer.py (`_compute_loss`: loss_type "sapo" and "dr_grpo",
importance_sampling_level "sequence", use_bias_correction_kl, `get_high_entropy_mask`, the
adaptive entropy update) and trl/experimental/gmpo/gmpo_trainer.py (`_compute_loss`, with
its entropy mask on the geometric mean); and, for DPPO, at commit
23eedc644caa78d76a63679407229d100c1c6206 (2026-07-20, the last before "Remove the
experimental DPPO trainer (#6402)"): trl/experimental/dppo/dppo_trainer.py
(`_compute_divergence_mask`, `_compute_loss`). Licensed under the Apache License 2.0
(Copyright 2020-2026 The HuggingFace Team). Transcribed as functions of tensors: `self.args`
become keyword arguments (TRL's defaults), the accelerator's cross-rank gather and the
gradient-accumulation normalizer are left out (one process, one micro-batch). Nothing in
rlvr imports this file.
"""

from __future__ import annotations

import math

import torch


def compute_loss(
    per_token_logps,
    old_per_token_logps,
    advantages,
    mask,
    loss_type="grpo",
    epsilon_low=0.2,
    epsilon_high=0.2,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    beta=0.0,
    ref_per_token_logps=None,
    use_bias_correction_kl=False,
    entropies=None,
    top_entropy_quantile=1.0,
    entropy_coef=0.0,
    importance_sampling_level="token",
    max_completion_length=None,
):
    """`GRPOTrainer._compute_loss` for loss_type "grpo", "dapo", "dr_grpo" or "sapo" with
    importance_sampling_level "token" or "sequence", one process and one micro-batch (so
    num_items_in_batch = mask.sum() and the accumulation normalizer is 1), static entropy
    coefficient, no vLLM correction, no off-policy mask."""
    if top_entropy_quantile < 1.0:
        entropy_mask = get_high_entropy_mask(entropies, mask, 1 - top_entropy_quantile)
    else:
        entropy_mask = None
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = per_token_logps - old_per_token_logps
    if importance_sampling_level == "token":
        log_importance_weights = log_ratio
    elif importance_sampling_level == "sequence":
        log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        log_importance_weights = log_importance_weights.unsqueeze(-1)
    else:
        raise ValueError(importance_sampling_level)
    coef_1 = torch.exp(log_importance_weights)
    if beta != 0.0:
        per_token_kl = (
            torch.exp(ref_per_token_logps - per_token_logps)
            - (ref_per_token_logps - per_token_logps)
            - 1
        )
        if use_bias_correction_kl:
            per_token_kl = per_token_kl * coef_1
    if loss_type in ["grpo", "dapo", "dr_grpo"]:
        coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
        per_token_loss1 = coef_1 * advantages
        per_token_loss2 = coef_2 * advantages
        per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    elif loss_type == "sapo":
        temperatures = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
        soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
        per_token_loss = -soft_coef_1 * advantages
    else:
        raise ValueError(loss_type)
    if entropy_mask is not None:
        per_token_loss = per_token_loss * entropy_mask
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type in ["grpo", "sapo"]:
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        normalizer = 1.0
    elif loss_type == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
        normalizer = 1.0
    else:  # dapo
        normalizer = mask.sum().clamp(min=1.0)
        loss = (per_token_loss * mask).sum() / normalizer
    if entropy_coef != 0.0:
        effective_mask = mask if entropy_mask is None else mask * entropy_mask
        if loss_type in ["dapo"]:
            entropy_loss = (entropies * effective_mask).sum() / normalizer
        else:
            entropy_loss = (
                (entropies * effective_mask).sum()
                / effective_mask.sum().clamp(min=1.0)
                / normalizer
            )
        loss = loss - entropy_coef * entropy_loss
    return loss


def get_high_entropy_mask(entropies, mask, threshold):
    """`GRPOTrainer.get_high_entropy_mask` on one process (the gather is the identity)."""
    local = entropies[mask.bool()].float()
    pad_value = -1e9
    gathered = local[local != pad_value]
    if gathered.numel() == 0:
        return torch.zeros_like(entropies, dtype=torch.bool)
    entropy_threshold = torch.quantile(gathered, threshold)
    masked_entropies = entropies * mask.float()
    entropy_mask = masked_entropies >= entropy_threshold
    return entropy_mask & mask.bool()


class AdaptiveEntropyController:
    """The adaptive entropy state and update of `_compute_loss` (one rank, one micro-batch
    per optimizer step), with GRPOConfig's defaults."""

    def __init__(self, entropy_coef, entropy_target=0.2, delta=0.005, coef_min=0.0, coef_max=1.0):
        self.entropy_coef = entropy_coef
        self.entropy_target = entropy_target
        self.entropy_coef_delta = delta
        self.entropy_coef_min = coef_min
        self.entropy_coef_max = coef_max
        self._last_world_entropy = float("inf")

    def apply_coef(self):
        return self.entropy_coef if self._last_world_entropy <= self.entropy_target else 0.0

    def step(self, world_entropy):
        if world_entropy <= self.entropy_target:
            self.entropy_coef = min(
                self.entropy_coef + self.entropy_coef_delta, self.entropy_coef_max
            )
        else:
            self.entropy_coef = max(
                self.entropy_coef - self.entropy_coef_delta, self.entropy_coef_min
            )
        self._last_world_entropy = world_entropy


def gmpo_loss(
    per_token_logps,
    old_per_token_logps,
    advantages,
    mask,
    epsilon_low=0.4,
    epsilon_high=0.4,
    entropies=None,
    top_entropy_quantile=1.0,
):
    """`GMPOTrainer._compute_loss` (beta = 0); `advantages` is (B,)."""
    if top_entropy_quantile < 1.0:
        entropy_mask = get_high_entropy_mask(entropies, mask, 1 - top_entropy_quantile)
    else:
        entropy_mask = None
    log_ratio = per_token_logps - old_per_token_logps
    clamped_log_ratio = torch.clamp(log_ratio, min=-epsilon_low, max=epsilon_high)
    advantages_col = advantages.unsqueeze(1)
    clipped_log_ratio = torch.where(
        advantages_col > 0,
        torch.minimum(log_ratio, clamped_log_ratio),
        torch.maximum(log_ratio, clamped_log_ratio),
    )
    seq_mask = mask * entropy_mask if entropy_mask is not None else mask
    log_importance_weights = (clipped_log_ratio * seq_mask).sum(-1) / seq_mask.sum(-1).clamp(
        min=1.0
    )
    coef = torch.exp(log_importance_weights)
    per_sequence_loss = -coef * advantages
    return per_sequence_loss.mean()


def dppo_binary_tv_loss(
    per_token_logps,
    sampling_per_token_logps,
    advantages,
    mask,
    num_items_in_batch,
    epsilon_low=0.15,
    epsilon_high=0.15,
    clip_ratio_c=20.0,
):
    """DPPOTrainer `_compute_loss` with divergence_type="binary_tv", beta = 0, one process."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = per_token_logps - sampling_per_token_logps
    ratio = torch.exp(log_ratio.clamp(max=math.log(clip_ratio_c))).detach()

    prob = torch.exp(per_token_logps)
    sampling_prob = torch.exp(sampling_per_token_logps)
    divergence = (prob - sampling_prob).abs()
    invalid_pos = (divergence > epsilon_high) & (prob > sampling_prob)
    invalid_neg = (divergence > epsilon_low) & (prob < sampling_prob)
    divergence_mask = torch.where(advantages > 0, ~invalid_pos, ~invalid_neg).float() * mask

    per_token_loss = -advantages * ratio * divergence_mask * per_token_logps
    normalizer = num_items_in_batch.clamp(min=1.0)
    return (per_token_loss * mask).sum() / normalizer
