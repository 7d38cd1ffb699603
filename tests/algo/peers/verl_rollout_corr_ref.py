"""Transcription of verl's rollout correction, for equality tests only.

Sources, volcengine/verl (Apache License 2.0, Copyright 2025 Bytedance Ltd. and/or its
affiliates):
- at b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29),
  verl/trainer/ppo/rollout_corr_helper.py: `compute_rollout_correction_weights` (token and
  sequence TIS), `compute_rollout_rejection_mask` (k1/k2/k3 options), `compute_offpolicy_metrics`
  (kl, k3_kl); verl/utils/torch_functional.py: `masked_sum`, `masked_mean`;
- at 9b718e1a7e55fbd974ae13a543e9e6cb89f1f735 (2026-01-14, the parent of "trust region
  sequence masking" #4544), the same file: `compute_rollout_rejection_mask` with levels
  token / sequence / geometric and a [lower, upper] band on the ratio itself;
- at 21271aabb90b074d943e7445525cabfec9f316f4 (2025-10-13),
  verl/trainer/ppo/mismatch_helper.py: `compute_rollout_importance_weights` (levels token /
  sequence / geometric, modes truncate / clip).

The logic that makes the weights and masks is transcribed line for line; the metrics
dictionaries, the DataProto wrapping, batch normalisation and the threshold-string parser's
error branches are left out. Nothing in rlvr imports this file.
"""

from __future__ import annotations

import math

import torch

SAFETY_BOUND = 20.0
TOKEN_LEVEL_ROLLOUT_RS_OPTIONS = {"token_k1", "token_k2", "token_k3"}


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


# --- b178a3c: rollout_corr_helper.py ---------------------------------------------------


def compute_rollout_correction_weights(log_ratio, response_mask, rollout_is="token", threshold=2.0):
    if rollout_is == "token":
        log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_safe)
    elif rollout_is == "sequence":
        log_ratio_sum = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    else:
        raise ValueError(f"Unsupported rollout_is: {rollout_is}")
    rollout_is_weights = rollout_is_weights * response_mask
    rollout_is_weights = rollout_is_weights.clamp(max=threshold)
    return rollout_is_weights.detach()


def _parse_threshold(option, spec):
    """One option's threshold, as `_parse_rollout_rs_thresholds` reads it."""
    spec = str(spec)
    if option.endswith("k1"):
        if "_" in spec:
            lower_str, upper_str = spec.split("_", 1)
        else:
            upper_str = spec
            lower_str = str(1.0 / float(upper_str))
        return {"lower": float(lower_str), "upper": float(upper_str)}
    return {"lower": None, "upper": float(spec)}


def compute_rollout_rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold):
    """One option (verl chains several with commas; every one must pass)."""
    option_name = rollout_rs
    thresholds_info = _parse_threshold(option_name, rollout_rs_threshold)
    log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    token_k1 = -log_ratio_safe
    token_k2 = 0.5 * log_ratio_safe**2
    token_k3 = torch.exp(log_ratio_safe) - 1.0 - log_ratio_safe
    response_mask_bool = response_mask.bool()
    combined_mask = torch.ones_like(response_mask, dtype=log_ratio.dtype)

    def _sequence_sum(values):
        return masked_sum(values, response_mask, axis=-1)

    def _sequence_mean(values):
        return masked_mean(values, response_mask, axis=-1)

    def _sequence_max(values):
        mask_bool = response_mask.bool()
        neg_inf = torch.tensor(float("-inf"), device=values.device, dtype=values.dtype)
        masked_values = values.masked_fill(~mask_bool, neg_inf)
        max_values = masked_values.max(dim=-1).values
        return torch.where(max_values == neg_inf, torch.zeros_like(max_values), max_values)

    is_k1_option = option_name.endswith("k1")
    upper_value = thresholds_info["upper"]
    lower_value = thresholds_info["lower"]
    if is_k1_option:
        lower_log = math.log(lower_value)
        upper_log = math.log(upper_value)
    stat = {"k1": token_k1, "k2": token_k2, "k3": token_k3}[option_name[-2:]]
    if option_name in TOKEN_LEVEL_ROLLOUT_RS_OPTIONS:
        if is_k1_option:
            token_keep_bool = (stat >= lower_log) & (stat <= upper_log)
        else:
            token_keep_bool = stat <= upper_value
    else:
        if option_name.startswith("seq_sum"):
            seq_stat = _sequence_sum(stat)
        elif option_name.startswith("seq_mean"):
            seq_stat = _sequence_mean(stat)
        else:
            seq_stat = _sequence_max(stat)
        if is_k1_option:
            seq_keep_bool_direct = (seq_stat >= lower_log) & (seq_stat <= upper_log)
        else:
            seq_keep_bool_direct = seq_stat <= upper_value
        token_keep_bool = seq_keep_bool_direct.unsqueeze(-1).expand_as(response_mask_bool)
    token_keep_mask = token_keep_bool.to(dtype=log_ratio.dtype)
    combined_mask = combined_mask * token_keep_mask
    return (response_mask * combined_mask).to(dtype=response_mask.dtype)


def compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask):
    """The two divergence entries (kl, k3_kl) of `compute_offpolicy_metrics`."""
    metrics = {}
    metrics["kl"] = masked_mean(rollout_log_prob - old_log_prob, response_mask).item()
    log_ratio = old_log_prob - rollout_log_prob
    k3_kl_matrix = torch.exp(log_ratio) - log_ratio - 1
    metrics["k3_kl"] = masked_mean(k3_kl_matrix, response_mask).item()
    return metrics


# --- 9b718e1: rollout_corr_helper.py, ratio-band rejection ------------------------------


def compute_rollout_rejection_mask_ratio(
    log_ratio, response_mask, rollout_rs="token", threshold=None, threshold_lower=None
):
    upper_threshold = threshold
    lower_threshold = threshold_lower if threshold_lower is not None else 1.0 / upper_threshold
    if rollout_rs == "token":
        log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_safe)
    elif rollout_rs == "sequence":
        log_ratio_sum = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    elif rollout_rs == "geometric":
        log_ratio_mean = masked_mean(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_mean_safe = torch.clamp(log_ratio_mean, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_mean_safe).expand_as(log_ratio)
    mask = (rollout_is_weights >= lower_threshold) & (rollout_is_weights <= upper_threshold)
    mask = mask.float()
    return response_mask * mask


# --- 21271aa: mismatch_helper.py ---------------------------------------------------------


def compute_rollout_importance_weights(
    old_log_prob,
    rollout_log_prob,
    response_mask,
    rollout_is_level="token",
    rollout_is_mode="truncate",
    rollout_is_threshold=None,
    rollout_is_threshold_lower=None,
):
    """With rollout_is_veto_threshold=None (the veto is not an rlvr choice)."""
    upper_threshold = rollout_is_threshold
    if rollout_is_threshold_lower is not None:
        lower_threshold = rollout_is_threshold_lower
    else:
        lower_threshold = 1.0 / upper_threshold
    log_ratio = old_log_prob - rollout_log_prob
    if rollout_is_level == "token":
        log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_safe)
    elif rollout_is_level == "sequence":
        log_ratio_sum = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(old_log_prob)
    elif rollout_is_level == "geometric":
        log_ratio_mean = masked_mean(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_mean_safe = torch.clamp(log_ratio_mean, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_mean_safe).expand_as(old_log_prob)
    if rollout_is_mode == "truncate":
        rollout_is_weights = rollout_is_weights.clamp(max=upper_threshold)
    elif rollout_is_mode == "clip":
        clip_mask = (rollout_is_weights >= lower_threshold) & (
            rollout_is_weights <= upper_threshold
        )
        clip_mask = clip_mask.float()
        rollout_is_weights = rollout_is_weights * clip_mask
    rollout_is_weights = rollout_is_weights * response_mask
    return rollout_is_weights
