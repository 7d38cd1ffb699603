"""make_task: build by name; errors name the bad task or option and list the valid ones."""

import pytest

from rlvr.tasks import TASKS, ArithmeticTask, CountdownTask, Task, make_task, task_options


def test_registry_contents():
    assert set(TASKS) == {
        "arithmetic",
        "countdown",
        "calculator",
        "lookup",
        "guess_number",
        "household",
        "alfworld",
        "worked",
        "shapes",
        "dataset",
        "gsm8k",
        "math",
        "dapo_math",
        "aime",
    }
    assert TASKS["arithmetic"] is ArithmeticTask and TASKS["countdown"] is CountdownTask
    assert all(issubclass(cls, Task) and cls.name == name for name, cls in TASKS.items())


def test_make_task_passes_options():
    task = make_task("arithmetic", digits=3, ops="+-", seed=7)
    assert isinstance(task, ArithmeticTask)
    assert (task.digits, task.ops, task.seed) == (3, "+-", 7)
    assert isinstance(make_task("countdown", num_count=4), CountdownTask)


def test_unknown_task_lists_valid_ones():
    with pytest.raises(
        ValueError,
        match="unknown task 'gsm9k'; valid tasks are: aime, alfworld, arithmetic, calculator, countdown, dapo_math",
    ):
        make_task("gsm9k")


def test_unknown_option_is_named_with_valid_options():
    with pytest.raises(
        ValueError,
        match=r"unknown option 'digit' for task 'arithmetic'; valid options are: digits, ops",
    ):
        make_task("arithmetic", digit=3)
    with pytest.raises(ValueError, match=r"unknown options 'bar', 'foo' for task 'countdown'"):
        make_task("countdown", foo=1, bar=2)


def test_task_options():
    assert task_options("countdown") == [
        "num_count",
        "max_number",
        "max_target",
        "seed",
        "train_size",
        "dev_size",
        "eval_size",
    ]


def test_bad_option_value_is_named():
    with pytest.raises(ValueError, match="digits must be an integer from 1 to 18, got 99"):
        make_task("arithmetic", digits=99)
