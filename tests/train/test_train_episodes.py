"""Episodes through the Trainer: what the sampler drew is what the trainer scores (ratio
exactly 1 on every policy token, after every observation), full fine-tune and LoRA, and
observation tokens stay out of every count."""

from __future__ import annotations

import math

import pytest
import torch
from local_model import local_trainer
from rounding_testlib import logprob_atol

ECHO = {
    "environment": "user_envs:Echo",
    "episode": {"max_turns": 4, "max_turn_tokens": 3},
    "max_new_tokens": 24,
}
LORA = {"lora": {"rank": 4, "alpha": 8, "target_modules": "all-linear"}}


@pytest.mark.parametrize("policy", [{}, LORA], ids=["full", "lora"])
def test_trainer_logprobs_equal_the_samplers_on_every_policy_token(tmp_path, policy):
    trainer = local_trainer(tmp_path, policy=policy, **ECHO)
    rollout = trainer._collect().rollout
    assert rollout.forced_mask.sum() > 0  # observations were inserted
    recomputed = trainer._logprobs(trainer.model, rollout)
    policy_tokens = rollout.loss_mask > 0
    after_observation = policy_tokens & (rollout.forced_mask.cumsum(-1) > 0)
    assert after_observation.any()
    ratio = (recomputed[policy_tokens] - rollout.sampler_logprobs[policy_tokens]).exp()
    # Sampler and trainer add in other orders: ratios within e^τ − 1 of 1 (rounding_testlib).
    bound = math.expm1(logprob_atol(trainer.model.config))
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=bound, rtol=0)


def test_observation_tokens_are_context_not_counts(tmp_path):
    trainer = local_trainer(tmp_path, **ECHO)
    collected = trainer._collect()
    rollout = collected.rollout
    prepared = trainer._prepare(rollout)
    observation = rollout.forced_mask > 0
    # Not trained on: the prepared mask (every normaliser's count) excludes them ...
    assert (prepared.response_mask[observation] == 0).all()
    assert prepared.response_mask.sum() == rollout.loss_mask.sum()
    # ... nor counted as generated, while the record says how many there were.
    metrics = trainer.train_step()
    assert metrics["env/observation_tokens"] > 0
    episodes = collected.generated.episodes
    policy = sum(int(m.sum()) for m in collected.generated.loss_mask)
    assert policy + sum(e.observation_tokens for e in episodes) == int(
        collected.generated.response_mask.sum()
    )


def test_the_calculator_episodes_are_scored_as_sampled(tmp_path):
    """The shipped tool environment on a policy that calls it: 100 supervised steps teach
    the embedded model the protocol (warm_target 1.0 is never reached, so it stops at 100;
    cached), then every policy token after a `=result` observation scores as sampled."""
    from rlvr.train.config import resolve_config
    from rlvr.train.loop import Trainer

    cfg = resolve_config(
        {
            "task": "calculator",
            "warm_target": 1.0,
            "warm_max_steps": 100,
            "prompts_per_step": 4,
            "group_size": 4,
            "eval_size": 8,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    with pytest.warns(UserWarning, match="warm start on 'calculator' stopped after 100 steps"):
        trainer = Trainer(cfg)
    rollout = trainer._collect().rollout
    assert sum(e.tool_calls for e in rollout.episodes) >= 4  # the tool was really called
    recomputed = trainer._logprobs(trainer.model, rollout)
    after_observation = (rollout.loss_mask > 0) & (rollout.forced_mask.cumsum(-1) > 0)
    assert after_observation.sum() >= 4
    ratio = (recomputed[after_observation] - rollout.sampler_logprobs[after_observation]).exp()
    # Sampler and trainer add in other orders: ratios within e^τ − 1 of 1 (rounding_testlib).
    bound = math.expm1(logprob_atol(trainer.model.config))
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=bound, rtol=0)
