"""The critic's optimizer settings are config fields, never torch defaults (issue 9)."""

from __future__ import annotations

import pytest
from local_model import local_trainer

from rlvr.train.config import resolve_config


def test_critic_weight_decay_is_the_configured_value(tmp_path):
    trainer = local_trainer(tmp_path, recipe="ppo", critic_weight_decay=0.3, weight_decay=0.05)
    assert [g["weight_decay"] for g in trainer.critic_optimizer.param_groups] == [0.3]
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.05]


def test_critic_weight_decay_default_is_explicit():
    # The default keeps torch's AdamW value, which the critic used to take silently.
    assert resolve_config({}).critic_weight_decay == 0.01


@pytest.mark.parametrize("name", ["critic_weight_decay", "weight_decay"])
def test_negative_weight_decay_is_rejected_by_name(name):
    with pytest.raises(ValueError, match=f"{name} must be a number ≥ 0"):
        resolve_config({name: -0.1})
