"""A user's environment or tools named in the config make any task multi-turn; what
cannot take effect is refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))
sys.path.insert(0, str(Path(__file__).parents[1] / "train"))

from local_model import local_trainer
from scripted_engine import EOS, ScriptedEngine

from rlvr.envs.attach import attach_environment
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task
from rlvr.train.config import resolve_config


def _guesser(context, k):
    """Guesses 50, then 75, then answers what it heard was right."""
    if "<guess>" not in context.split("A:")[-1]:
        return "<guess>50</guess>"
    if context.endswith("higher"):
        return "<guess>75</guess>"
    return " \\boxed{75}" + EOS


def test_a_user_environment_from_the_config_plays_each_episode():
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, "user_envs:GuessNumber", {"max_guesses": 3}, [], {"max_turns": 4})
    problem = next(p for p in task.problems("train") if p.answer == "75")
    engine = ScriptedEngine(CharTokenizer(), _guesser)
    params = SamplingParams(group_size=2, max_new_tokens=60)
    gen = generate_for(engine, task, [problem], params, torch.Generator())
    # 50 → " higher" (forced), 75 → " right" and done: the environment ended the episode.
    assert gen.texts == ["<guess>50</guess> higher<guess>75</guess> right"] * 2
    assert [(e.turns, e.tool_calls, e.ended_by) for e in gen.episodes] == [(2, 2, "env")] * 2
    assert task.verify(problem, gen.texts[0]).correct is False  # it never wrote \boxed{75}
    assert task.episode_budgets.max_turns == 4


def test_config_tools_make_training_multi_turn(tmp_path):
    trainer = local_trainer(
        tmp_path,
        tools=["rlvr.tasks.calculator:calc"],
        episode={"max_turns": 2, "max_turn_tokens": 4},
        max_new_tokens=12,
    )
    metrics = trainer.train_step()
    # A random model never closes </calc>: each turn ends at its 4-token budget, the
    # environment hears no call (the turn is an answer) and ends the episode after turn 1,
    # unless the model emitted EOS first.
    assert metrics["env/turns"] == 1.0
    assert metrics["env/ended_env"] + metrics["env/ended_answer"] == 1.0
    assert metrics["env/tool_calls"] == 0.0 and "env/valid_call_rate" not in metrics


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"episode": {"max_turns": 2}}, r"episode \['max_turns'\] applies to multi-turn tasks"),
        ({"environment": "user_envs:Nope"}, r"user_envs has no class or function 'Nope'"),
        ({"environment": "no_such_mod:E"}, r"cannot import 'no_such_mod'"),
        ({"tools": ["calc"]}, r"tools\[0\] must look like 'module:name'"),
        (
            {"environment": "user_envs:GuessNumber", "tools": ["rlvr.tasks.calculator:calc"]},
            "set environment or tools, not both",
        ),
        ({"environment_options": {"a": 1}}, r"environment_options \['a'\] need environment set"),
        (
            {"task": "calculator", "tools": ["rlvr.tasks.calculator:calc"]},
            "task 'calculator' has its own environment",
        ),
        (
            {"tools": ["rlvr.tasks.calculator:calc"], "episode": {"max_turn": 2}},
            r"unknown key\(s\) \['max_turn'\]",
        ),
        (
            {"tools": ["rlvr.tasks.calculator:calc"], "think_budget": 3},
            "think_budget applies to one-turn tasks",
        ),
    ],
)
def test_settings_that_cannot_take_effect_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(values)


def test_an_environment_class_must_make_an_environment():
    task = make_task("arithmetic")
    with pytest.raises(ValueError, match=r"NotAnEnvironment does not subclass rlvr\.envs\.Env"):
        attach_environment(task, "user_envs:NotAnEnvironment", {}, [], {})  # when the run starts
    attach_environment(task, "user_envs:not_an_environment", {}, [], {})  # a factory: when called
    with pytest.raises(
        ValueError, match=r"made a NotAnEnvironment, not an rlvr\.envs\.Environment"
    ):
        task.environment(task.problems("train")[0])


def test_the_documented_environment_is_the_tested_one():
    root = Path(__file__).parents[2]
    example = (root / "tests" / "user_envs.py").read_text().split("\n\n\nclass Echo")[0]
    assert example.strip() in (root / "docs" / "extending.md").read_text()
    assert len(example.strip().splitlines()) <= 40  # "a user environment in under 40 lines"
