"""Evaluate a saved or embedded policy on a task split (`rlvr eval`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.checks import is_int
from rlvr.envs.attach import attach_environment
from rlvr.envs.chat_tools import declare_chat_tools
from rlvr.eval.evaluate import evaluate_policy
from rlvr.models.hf_policy import chat_formatted, prepare_policy
from rlvr.models.load import EMBEDDED
from rlvr.models.policy_options import PolicyOptions
from rlvr.rollout import HFEngine, RolloutEngine
from rlvr.rollout.interrupt import ForcedInterruption
from rlvr.tasks import SPLITS, Problem, Task, make_task
from rlvr.warmstart import load_policy


@dataclass(frozen=True)
class ModelSetup:
    """How a policy is loaded and sampled from; `rlvr eval --run` fills it from the run's
    config so that a checkpoint is evaluated as it was trained."""

    model: str = EMBEDDED
    """'embedded', a directory such as runs/demo/checkpoint/policy, or a hub id."""
    policy: dict[str, Any] = field(default_factory=dict)
    """`PolicyOptions` of a Hugging Face policy (chat_template, dtype, device, ...)."""
    engine: str = "hf"
    """'hf' (in-process) or 'vllm'."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    fp32_head: bool = True
    """The in-process engine computes the LM head in float32 (the recipe's choice)."""
    think_budget: int | None = None
    """Forced length interruption after this many tokens (`rlvr.rollout.interrupt`)."""
    interrupt_phrase: str = " Final answer:"


def load_engine(
    setup: ModelSetup, task: Task, task_name: str, task_options: dict, max_new_tokens: int
) -> RolloutEngine:
    """The engine sampling from `setup`'s policy (dropout off). With a chat template,
    `task`'s prompts are re-rendered in place, so select its problems afterwards."""
    policy, tokenizer, _ = load_policy(setup.model, task_name, task_options, 0)
    if setup.model != EMBEDDED:
        options = PolicyOptions.from_dict(setup.policy)
        policy, _ = prepare_policy(policy, options)
        chat_formatted(task, tokenizer, options, getattr(task, "tool_schemas", None))
        declare_chat_tools(task, tokenizer, options.enable_thinking)
    policy.eval()  # dropout off
    engine: RolloutEngine
    if setup.engine == "vllm":
        from rlvr.rollout.vllm_engine import VLLMEngine

        engine = VLLMEngine.create(policy, tokenizer, **setup.engine_options)
    else:
        compile_ = setup.engine_options.get("compile", False)
        engine = HFEngine(policy, tokenizer, fp32_head=setup.fp32_head, compile=compile_)
    if setup.think_budget is not None:
        engine = ForcedInterruption(
            engine, tokenizer, setup.think_budget, setup.interrupt_phrase, max_new_tokens
        )
    return engine


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
) -> dict[str, float]:
    """Metrics of `model` (a name, or a `ModelSetup`) on the first `size` problems of
    `split` (0: all), with a response budget of `max_new_tokens` (None: the task's
    default): avg@samples at `temperature` and `top_p`, pass@samples, greedy accuracy.
    `episodes` (a run's environment, tools, tool_format and episode fields) makes the
    evaluation multi-turn, with tool use reported (`rlvr.eval.tool_metrics`)."""
    setup = model if isinstance(model, ModelSetup) else ModelSetup(model)
    task = with_episodes(make_task(task_name, **task_options), episodes)
    select_problems(task, split, size)  # a bad split or size is named before loading
    _check_count("samples", samples, 1, "samples per problem")
    max_new_tokens = response_budget(task, max_new_tokens)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    engine = load_engine(setup, task, task_name, task_options, max_new_tokens)
    problems = select_problems(task, split, size)
    result = evaluate_policy(
        engine,
        task,
        problems,
        samples=samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    return {
        "eval/items": float(len(problems)),
        "eval/max_new_tokens": float(max_new_tokens),
        **result.metrics,
    }


def with_episodes(task: Task, episodes: dict[str, Any] | None) -> Task:
    """`task` with a run's environment or tools and episode budgets (None: as it is)."""
    if not episodes:
        return task
    return attach_environment(
        task,
        episodes.get("environment"),
        episodes.get("environment_options") or {},
        episodes.get("tools") or [],
        episodes.get("episode") or {},
        episodes.get("tool_format", "tags"),
    )


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
