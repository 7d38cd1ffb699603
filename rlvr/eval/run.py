"""Evaluate a saved or embedded policy on a task split (`rlvr eval`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.checks import is_int
from rlvr.eval.evaluate import evaluate_policy
from rlvr.parts import Episodes, ModelSpec, build_task, open_engine
from rlvr.rollout import RolloutEngine
from rlvr.tasks import SPLITS, Problem, Task

ModelSetup = ModelSpec
"""How a policy is loaded and sampled from (`rlvr.parts.ModelSpec`, by its eval name)."""


def prepare_eval(
    setup: ModelSpec,
    task_name: str,
    task_options: dict[str, Any],
    episodes: dict[str, Any] | None,
    split: str,
    size: int,
    max_new_tokens: int | None,
) -> tuple[Task, RolloutEngine, list[Problem], int]:
    """The parts of an evaluation, resolved once (`rlvr.parts`): the task with a run's
    `episodes` (None: as it is), the engine over `setup`'s policy, the first `size`
    problems of `split` (0: all) as the engine's template renders them, and the response
    budget (`max_new_tokens`, or the task's default when None). A bad split or size is
    named before the model loads."""
    task = build_task(task_name, task_options, Episodes.of(episodes) if episodes else None)
    select_problems(task, split, size)
    budget = response_budget(task, max_new_tokens)
    engine = open_engine(setup, task, task_name, task_options, budget)
    return task, engine, select_problems(task, split, size), budget


def evaluate_model(
    model: str | ModelSetup,
    task_name: str,
    task_options: dict[str, Any],
    *,
    split: str = "eval",
    size: int = 0,
    samples: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
    seed: int = 0,
    episodes: dict[str, Any] | None = None,
    progress: Callable[[int, int], Callable[[int], None]] | None = None,
) -> dict[str, float]:
    """Metrics of `model` (a name, or a `ModelSetup`) on the first `size` problems of
    `split` (0: all), with a response budget of `max_new_tokens` (None: the task's
    default): avg@samples at `temperature` and `top_p`, pass@samples, greedy accuracy.
    `episodes` (a run's environment, tools, tool_format and episode fields) makes the
    evaluation multi-turn, with tool use reported (`rlvr.eval.tool_metrics`).
    `progress(problems, samples)`, called once the problems are known, returns what hears
    each batch of problems done (`evaluate_policy`)."""
    setup = model if isinstance(model, ModelSetup) else ModelSetup(model)
    _check_count("samples", samples, 1, "samples per problem")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    task, engine, problems, max_new_tokens = prepare_eval(
        setup, task_name, task_options, episodes, split, size, max_new_tokens
    )
    result = evaluate_policy(
        engine,
        task,
        problems,
        samples=samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        progress=progress(len(problems), samples) if progress is not None else None,
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
