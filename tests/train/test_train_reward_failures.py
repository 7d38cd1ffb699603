"""User reward functions that hang, raise, or return NaN, the wrong count or the wrong type:
each failure is flagged on its samples, counted and named, and `reward_errors` says what
it costs (drop the group, score 0, or stop the run) — never a hung or silently idle run."""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from rlvr.algo import prepare_batch
from rlvr.algo.recipes import get_recipe
from rlvr.rewards import RewardError, RewardModel, parse_reward_funcs
from rlvr.train.collect import without_failed_groups
from rlvr.train.records.rollout_record import Rollout

COLUMNS = {"reference": ["1", "2", "3"], "correct": [True, False, True]}


def _model(*funcs, **settings) -> RewardModel:
    return RewardModel(parse_reward_funcs(list(funcs)), **settings)


@pytest.mark.parametrize("isolation", ["auto", "process"])
def test_a_hanging_reward_times_out_and_fails_its_samples(isolation):
    model = _model(
        "rlvr.rewards:correctness", "user_rewards:hang", timeout_s=0.5, isolation=isolation
    )
    started = time.perf_counter()
    with pytest.warns(UserWarning, match=r"user_rewards:hang timed out after 0.5s \(batch call 1"):
        scored = model.score(["p"] * 3, ["a", "b", "c"], COLUMNS)
    assert time.perf_counter() - started < 30  # not the 60 s the function sleeps
    assert scored.failed == [True, True, True]
    assert scored.rewards == [1.0, 0.0, 1.0]  # correctness still counts; hang gave nothing
    assert model.pop_failures() == {"reward/fn/hang/timeout": 3.0}
    assert model.pop_failures() == {}  # counted once


def test_nan_fails_only_its_own_sample_and_warns_once():
    model = _model({"func": "user_rewards:nan_for_first", "weight": 0.5})
    with pytest.warns(UserWarning, match=r"nan_for_first returned nan for completion 0"):
        scored = model.score(["p"] * 3, ["a", "b", "c"], COLUMNS)
    # rows 1, 2: 0.5 × 1 = 0.5; row 0 failed and contributes nothing
    assert scored.rewards == [0.0, 0.5, 0.5] and scored.failed == [True, False, False]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second batch's NaN is counted, not printed
        model.score(["p"] * 3, ["a", "b", "c"], COLUMNS)
    assert model.pop_failures() == {"reward/fn/nan_for_first/nonfinite": 2.0}


@pytest.mark.parametrize(
    ("func", "kind", "message"),
    [
        ("raises", "error", r"user_rewards:raises raised KeyError: 'judge_score'"),
        ("one_too_few", "count", r"returned 2 rewards for 3 completions"),
        ("text_values", "type", r"returned 'good' \(str\) for completion 0"),
        ("always_nan", "nonfinite", r"returned nan for completion 0"),
    ],
)
def test_each_failure_stops_the_run_under_stop_naming_function_and_call(func, kind, message):
    model = _model(f"user_rewards:{func}", on_error="stop")
    with pytest.raises(RewardError, match=message) as err:
        model.score(["p"] * 3, ["a", "b", "c"], COLUMNS)
    assert "batch call 1, 3 completions" in str(err.value)
    assert "reward_errors='stop'" in str(err.value)
    lenient = _model(f"user_rewards:{func}", on_error="zero")
    with pytest.warns(UserWarning, match=message):
        scored = lenient.score(["p"] * 3, ["a", "b", "c"], COLUMNS)
    assert scored.rewards == [0.0, 0.0, 0.0] and all(scored.failed)
    assert lenient.pop_failures() == {f"reward/fn/{func}/{kind}": 3.0}


def test_a_wrong_signature_is_named_before_the_first_call():
    with pytest.raises(ValueError, match=r"user_rewards:positional_only\(texts\) cannot be called"):
        _model("user_rewards:positional_only")


def test_a_function_without_kwargs_gets_the_columns_it_names():
    model = _model("user_rewards:needs_difficulty")
    assert model(["p", "q"], ["a", "b"], {"difficulty": [2, 3], "reference": ["x", "y"]}) == [
        2.0,
        3.0,
    ]
    with pytest.raises(ValueError, match=r"needs 'difficulty'.*available: completions, prompts"):
        model(["p"], ["a"], {})


def test_invalid_reward_settings_are_named():
    with pytest.raises(ValueError, match="reward_errors must be one of drop, zero, stop"):
        _model("user_rewards:brevity", on_error="ignore")
    with pytest.raises(ValueError, match="reward_timeout_s must be a number of seconds ≥ 0"):
        _model("user_rewards:brevity", timeout_s=-1)


def _rollout(group_ids, failed, correct, rewards) -> Rollout:
    n = len(group_ids)
    return Rollout(
        prompt_ids=[[1]] * n,
        response_ids=torch.ones(n, 2, dtype=torch.long),
        response_mask=torch.ones(n, 2),
        sampler_logprobs=torch.zeros(n, 2),
        truncated=torch.zeros(n, dtype=torch.bool),
        group_ids=torch.tensor(group_ids),
        problem_uids=[str(g) for g in group_ids],
        texts=["x"] * n,
        correct=torch.tensor(correct, dtype=torch.float32),
        formatted=torch.ones(n),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        reward_failed=torch.tensor(failed),
    )


def test_drop_leaves_out_the_whole_group_of_a_failed_sample():
    rollout = _rollout([0, 0, 1, 1], [False, True, False, False], [1, 0, 1, 0], [1, 0, 1, 0])
    task = type("T", (), {"reward_model": _model("user_rewards:brevity")})()
    kept = without_failed_groups(rollout, task)
    assert kept.group_ids.tolist() == [1, 1]  # group 0's baseline would lack a reward


def test_concat_fills_a_missing_failure_flag_with_false():
    flagged = _rollout([0, 0], [True, False], [1, 0], [1, 0])
    plain = _rollout([1, 1], [False, False], [1, 0], [1, 0])
    plain.reward_failed = None
    assert Rollout.concat([flagged, plain]).reward_failed.tolist() == [True, False, False, False]


def test_dynamic_sampling_can_key_on_the_reward():
    # One group, both correct (correctness uniform) but rewards 1.0 and 0.5 (a user reward).
    batch = dict(
        rewards=torch.tensor([1.0, 0.5]),
        correct=torch.tensor([1.0, 1.0]),
        truncated=torch.zeros(2, dtype=torch.bool),
        response_mask=torch.ones(2, 3),
        group_ids=torch.tensor([0, 0]),
        max_new_tokens=8,
    )
    by_correct = prepare_batch(get_recipe("dapo"), **batch)
    by_reward = prepare_batch(get_recipe("dapo", dynamic_sampling_key="reward"), **batch)
    assert by_correct.keep.tolist() == [False, False]  # DAPO: uniform correctness, dropped
    assert by_reward.keep.tolist() == [True, True]
    # group_norm: mean 0.75, unbiased std √((0.25²+0.25²)/1) = 0.35355 → Â = ±0.7071
    assert by_reward.advantages[:, 0].tolist() == pytest.approx([0.70711, -0.70711], abs=1e-4)
    with pytest.raises(ValueError, match="dynamic_sampling_key must be one of correct, reward"):
        get_recipe("dapo", dynamic_sampling_key="score")


def _local_config(tmp_path, **overrides):
    from local_model import local_policy_dir

    from rlvr.train.config import resolve_config

    values = {
        "model": local_policy_dir(tmp_path),
        "task_options": {"digits": 2, "ops": "+"},
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 8,
        "eval_size": 4,
        "eval_every": 10,
        "steps": 2,
        "progress": False,
        "out": str(tmp_path / "run"),
        **overrides,
    }
    return resolve_config(values)


def test_a_run_whose_rewards_all_fail_says_why_it_made_no_update(tmp_path, capsys):
    import json

    from rlvr.train.run import run_training

    cfg = _local_config(tmp_path, reward_funcs=["user_rewards:always_nan"])
    with pytest.warns(UserWarning) as caught:
        summary = run_training(cfg)
    messages = [str(w.message) for w in caught]
    assert any("always_nan returned nan for completion 0" in m for m in messages)
    assert not any("no policy update" in m for m in messages)  # a notice, not a warning
    # One line on stderr, as the run's other notices: no "UserWarning", no source line.
    why = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("rlvr: warning: no policy update in the first 2 steps")
    ]
    assert len(why) == 1 and "reward functions failed on 8 of 8 responses" in why[0]
    assert summary["skipped_updates"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    steps = [r for r in records if r.get("step", 0) >= 1 and "reward/failed_samples" in r]
    assert [r["reward/failed_samples"] for r in steps] == [8.0, 8.0]  # 2 prompts × 4 samples
    assert [r["reward/fn/always_nan/nonfinite"] for r in steps] == [8.0, 8.0]


def test_a_run_whose_rewards_are_all_zero_says_no_gradient_reached_the_weights(tmp_path, capsys):
    """The vision trial's run scored 0 everywhere and finished silently: every advantage was
    0, every backward skipped, nothing trained. It now says so once, as the notice above."""
    from rlvr.train.run import run_training

    cfg = _local_config(tmp_path, reward_funcs=["user_rewards:always_zero"], kl_coef=0.0)
    summary = run_training(cfg)
    why = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("rlvr: warning: no gradient in the first 2 steps")
    ]
    assert len(why) == 1
    assert "every advantage was exactly 0" in why[0] and "reward/mean 0.000" in why[0]
    assert summary["skipped_updates"] == 0  # the batches were kept; only the gradient was 0


def test_a_run_with_a_kl_term_has_a_gradient_and_no_notice(tmp_path, capsys):
    """β > 0: the KL term reaches every row, so the backward runs and nothing is said."""
    from rlvr.train.run import run_training

    cfg = _local_config(tmp_path, reward_funcs=["user_rewards:always_zero"], kl_coef=0.04)
    run_training(cfg)
    assert "no gradient in the first" not in capsys.readouterr().err


def test_a_hanging_reward_under_stop_ends_the_run_naming_it(tmp_path):
    from rlvr.train.run import run_training

    cfg = _local_config(
        tmp_path, reward_funcs=["user_rewards:hang"], reward_timeout_s=0.5, reward_errors="stop"
    )
    with pytest.raises(RewardError, match=r"user_rewards:hang timed out after 0.5s"):
        run_training(cfg)
    assert (tmp_path / "run" / "checkpoint.crash").is_dir()  # nothing good was lost


def test_reward_settings_without_reward_funcs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="reward_errors='stop' applies to reward_funcs"):
        _local_config(tmp_path, reward_errors="stop")


def test_dapo_on_a_user_reward_keyed_on_correctness_is_pointed_out(tmp_path):
    with pytest.warns(UserWarning, match="set dynamic_sampling_key=reward"):
        _local_config(tmp_path, recipe="dapo", reward_funcs=["user_rewards:brevity"])


@pytest.mark.parametrize("scalar", [torch.tensor(1.0), pytest.importorskip("numpy").array(0.5)])
def test_a_zero_dimensional_result_is_a_type_failure_not_a_crash(scalar):
    from rlvr.rewards.guard import guarded_call

    kwargs = {"prompts": ["p", "q"], "completions": ["a", "b"]}
    result = guarded_call("r", lambda prompts, completions, **_: scalar, kwargs, 2, 5.0, "auto")
    assert result.values == [None, None]
    assert [f[0] for f in result.failures] == ["type", "type"]


def test_no_update_names_a_failing_environment():
    from types import SimpleNamespace

    from rlvr.train import no_update

    recipe = get_recipe("grpo")
    cfg = SimpleNamespace(reward_errors="drop", reward_funcs=[])
    metrics = {"rollout/generated_responses": 8.0, "env/failed_frac": 0.5}
    assert no_update.due(5, 50, 5) and not no_update.due(5, 50, 4) and no_update.due(2, 2, 2)
    text = no_update.explain(5, metrics, recipe, cfg)
    assert text.startswith("no policy update in the first 5 steps")
    assert "the environment failed on 50% of the episodes" in text
