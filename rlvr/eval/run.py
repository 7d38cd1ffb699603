"""Evaluate a saved or embedded policy on a task split (`rlvr eval`)."""

from __future__ import annotations

from typing import Any

from rlvr.checks import is_int
from rlvr.eval.evaluate import evaluate_policy
from rlvr.rollout import HFEngine
from rlvr.tasks import SPLITS, Problem, Task, make_task
from rlvr.warmstart import load_policy


def evaluate_model(
    model: str,
    task_name: str,
    task_options: dict[str, Any],
    *,
    split: str = "eval",
    size: int = 0,
    samples: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Metrics of `model` ('embedded', a directory such as runs/demo/checkpoint/policy, or
    a hub id) on the first `size` problems of `split` (0: all), with a response budget of
    `max_new_tokens` (None: the task's default)."""
    task = make_task(task_name, **task_options)
    problems = select_problems(task, split, size)
    _check_count("samples", samples, 1, "samples per problem")
    max_new_tokens = response_budget(task, max_new_tokens)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    policy, tokenizer, _ = load_policy(model, task_name, task_options, 0)
    policy.eval()  # dropout off
    result = evaluate_policy(
        HFEngine(policy, tokenizer),
        task,
        problems,
        samples=samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    return {
        "eval/items": float(len(problems)),
        "eval/max_new_tokens": float(max_new_tokens),
        **result.metrics,
    }


def select_problems(task: Task, split: str, size: int) -> list[Problem]:
    """The first `size` problems of `split` (0: all), validated against the split's size."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid; choose one of: {', '.join(SPLITS)}")
    available = task.split_size(split)
    _check_count("size", size, 0, f"the {available} problems of split {split!r}; 0: all")
    if size > available:
        raise ValueError(
            f"size={size} exceeds the {available} problems of split {split!r}; "
            f"use 1 to {available}, or 0 for all"
        )
    problems = task.problems(split)
    return problems[:size] if size else problems


def response_budget(task: Task, max_new_tokens: int | None) -> int:
    """`max_new_tokens`, or the task's default budget (which fits its answers) when None."""
    if max_new_tokens is None:
        max_new_tokens = task.default_max_new_tokens
    _check_count("max_new_tokens", max_new_tokens, 1, "tokens per response")
    return max_new_tokens


def _check_count(name: str, value: object, low: int, meaning: str) -> None:
    if not is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer ≥ {low} ({meaning}), got {value!r}")
