"""Rewards: the user's weighted reward functions and the built-in ones (`functions.py`: what a
config's `reward_funcs: [rlvr.rewards:correctness]` names), and the guard that runs one
untrusted call under a time limit and names every failure (`guard.py`)."""

from rlvr.rewards.functions import (
    RESERVED,
    REWARD_ERRORS,
    RewardError,
    RewardFunc,
    RewardModel,
    RewardSpec,
    Scored,
    aime_correct,
    attach_rewards,
    batch_columns,
    check_reward_settings,
    correctness,
    format_reward,
    gsm8k_correct,
    math_correct,
    parse_reward_funcs,
    resolve,
    reward_metrics,
    score_batch,
    task_rewards,
)

__all__ = [
    "RESERVED",
    "REWARD_ERRORS",
    "RewardError",
    "RewardFunc",
    "RewardModel",
    "RewardSpec",
    "Scored",
    "aime_correct",
    "attach_rewards",
    "batch_columns",
    "check_reward_settings",
    "correctness",
    "format_reward",
    "gsm8k_correct",
    "math_correct",
    "parse_reward_funcs",
    "resolve",
    "reward_metrics",
    "score_batch",
    "task_rewards",
]
