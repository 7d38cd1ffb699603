"""Reward functions from modules: weights, None, the batch columns they receive, errors."""

from __future__ import annotations

import pytest
import user_rewards

from rlvr.rewards import RewardModel, attach_rewards, parse_reward_funcs, task_rewards
from rlvr.tasks.dataset_task import DataProblem
from rlvr.verify import Verdict


def _problem(i, answer):
    return DataProblem(f"d/train/{i}", f"Q{i}", answer, "", {"question": f"Q{i}", "line": i})


def test_weighted_sum_with_none_and_dataset_columns():
    user_rewards.seen_columns.calls.clear()
    model = RewardModel(
        parse_reward_funcs(
            ["rlvr.rewards:correctness", {"func": "user_rewards:seen_columns", "weight": 0.5}]
        )
    )
    problems = [_problem(0, "4"), _problem(1, "3")]
    verdicts = [Verdict(True, True, "4"), Verdict(False, True, "5")]
    task = attach_rewards(type("T", (), {})(), [])
    assert task_rewards(task, problems, ["a", "b"], verdicts) == [1.0, 0.0]  # default
    task.reward_model = model
    # row 0: correctness 1 + 0.5 × 1 (even reference) = 1.5; row 1: 0 + nothing (None) = 0
    assert task_rewards(task, problems, ["\\boxed{4}", "\\boxed{5}"], verdicts) == [1.5, 0.0]
    call = user_rewards.seen_columns.calls[-1]
    assert call == {"question": ["Q0", "Q1"], "reference": ["4", "3"], "correct": [True, False]}
    assert model.last_means == {"correctness": 0.5, "seen_columns": 1.0}


def test_builtin_verifier_rewards_check_against_the_reference():
    model = RewardModel(parse_reward_funcs(["rlvr.rewards:gsm8k_correct"]))
    columns = {"reference": ["1000", "7"], "correct": [False, False], "formatted": [False, False]}
    assert model(["p", "q"], ["#### 1,000", "\\boxed{8}"], columns) == [1.0, 0.0]


def test_errors_name_the_reward_function():
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        RewardModel(parse_reward_funcs(["no_such_module:f"]))
    with pytest.raises(ValueError, match="user_rewards has no function 'nope'"):
        RewardModel(parse_reward_funcs(["user_rewards:nope"]))
    with pytest.raises(ValueError, match=r"reward_funcs\[0\].weight must be a finite number"):
        parse_reward_funcs([{"func": "a:b", "weight": "heavy"}])
    model = RewardModel(parse_reward_funcs(["user_rewards:brevity"]), on_error="stop")
    model.funcs[0] = lambda prompts, completions, **_: [1.0]
    with pytest.raises(ValueError, match="returned 1 rewards for 2 completions"):
        model(["p", "q"], ["a", "b"], {})


def test_dataset_columns_named_like_rlvr_arguments_are_not_passed_twice():
    from rlvr.rewards import batch_columns

    problem = DataProblem("d/train/0", "Q", "4", "", {"completions": "x", "correct": "no", "q": 1})
    columns = batch_columns([problem], [Verdict(True, True, "4")])
    assert "completions" not in columns and columns["correct"] == [True] and columns["q"] == [1]
