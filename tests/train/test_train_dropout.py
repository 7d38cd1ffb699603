"""Every RL forward runs with dropout off (issue 9): a policy whose config has dropout
would otherwise give two different log-probs for the same weights, and the ratio of an
on-policy step would be dropout noise instead of exactly 1."""

from __future__ import annotations

import math

import torch
from local_model import local_trainer
from rounding_testlib import logprob_atol

from rlvr.models import response_logprobs
from rlvr.models.modes import checkpointing
from rlvr.train import Trainer


def dropout_trainer(tmp_path, **overrides) -> Trainer:
    return local_trainer(tmp_path, {"attention_dropout": 0.1}, **overrides)


def test_two_training_forwards_of_the_same_weights_are_equal(tmp_path):
    trainer = dropout_trainer(tmp_path, recipe="ppo")
    rollout = trainer.engine.generate(["1+2=", "3+4="], trainer.params, torch.Generator())
    pad = trainer.tokenizer.pad_token_id
    args = (rollout.prompt_ids, rollout.response_ids, rollout.response_mask, pad)
    first = response_logprobs(trainer.model, *args)  # with gradient, as in the update
    second = response_logprobs(trainer.model, *args)
    assert first.requires_grad
    assert torch.equal(first, second)
    values = [trainer.critic(*args) for _ in range(2)]
    assert torch.equal(values[0], values[1])


def test_on_policy_ratio_is_exactly_one_with_a_dropout_model(tmp_path):
    # ppo computes π_old in a separate no-grad forward (the KL enters the reward), so with
    # dropout on the first training forward would disagree with it: ρ ≠ 1, clipped tokens.
    # The random policy gets every sum wrong; shorter is better gives the rewards variance,
    # so the step runs its backward (a step of zero advantages skips it).
    trainer = dropout_trainer(tmp_path, recipe="ppo", reward_funcs=["user_rewards:brevity"])
    metrics = trainer.train_step()
    assert metrics["train/update_skipped"] == 0.0
    # π_old's no-grad forward and the training forward add in other orders (other batch
    # shapes): ρ within e^τ − 1 of 1 (rounding_testlib.py), far inside the clip range;
    # dropout left on would move it by tenths.
    assert abs(metrics["clip/ratio_mean"] - 1.0) <= math.expm1(logprob_atol(trainer.model.config))
    assert metrics["clip/frac"] == 0.0
    assert not trainer.model.training and not trainer.critic.training


def test_dropout_off_keeps_gradient_checkpointing_active(tmp_path):
    # HF gradient checkpointing runs only in train mode, so eval() would silently turn it
    # off; the policy stays in train mode with every dropout probability at 0 instead.
    trainer = dropout_trainer(
        tmp_path, recipe="grpo", policy={"gradient_checkpointing": True}, steps=1
    )
    assert trainer.model.training and checkpointing(trainer.model)
    attention = [m for m in trainer.model.modules() if hasattr(m, "attention_dropout")]
    assert attention and all(m.attention_dropout == 0.0 for m in attention)
    rollout = trainer.engine.generate(["1+2=", "3+4="], trainer.params, torch.Generator())
    pad = trainer.tokenizer.pad_token_id
    args = (rollout.prompt_ids, rollout.response_ids, rollout.response_mask, pad)
    assert torch.equal(
        response_logprobs(trainer.model, *args), response_logprobs(trainer.model, *args)
    )
