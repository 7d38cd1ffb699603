"""A user's environment or tools, named in a run's config, on any task.

    environment: my_envs:GuessNumber        # module:Class (or a factory), made per episode
    environment_options: {low: 1, high: 64} # its keyword arguments
    tools: [my_tools:search, my_tools:calc] # or plain functions, behind ToolEnvironment
    episode: {max_turns: 6, max_tool_calls: 5, max_observation_tokens: 128}

Either makes the task multi-turn: every episode gets a fresh environment, reset with its
task row. Everything that cannot take effect is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.checks import resolve_callable
from rlvr.envs.base import Environment
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.tools import ToolEnvironment


def resolve(reference: Any, field: str) -> Callable[..., Any]:
    """The class or function `module:name` names; errors name the field."""
    return resolve_callable(reference, field, "class or function")


def environment_factory(
    environment: str | None, options: dict[str, Any], tools: list[Any]
) -> Callable[[], Environment] | None:
    """What makes one episode's environment from the config's fields; None when neither
    `environment` nor `tools` is set."""
    if environment is not None and tools:
        raise ValueError(
            "set environment or tools, not both: tools run inside rlvr's ToolEnvironment; a "
            "custom environment calls its own tools"
        )
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a list of 'module:function', got {tools!r}")
    if tools:
        if options:
            raise ValueError(
                f"environment_options {sorted(options)} apply to environment, not tools"
            )
        functions = [resolve(t, f"tools[{i}]") for i, t in enumerate(tools)]
        return lambda: ToolEnvironment(functions)
    if environment is None:
        if options:
            raise ValueError(f"environment_options {sorted(options)} need environment set")
        return None
    cls = resolve(environment, "environment")
    return lambda: _check(cls(**options), environment)


def _check(env: Any, name: str) -> Environment:
    if not isinstance(env, Environment):
        raise ValueError(
            f"environment {name!r} made a {type(env).__name__}, not an rlvr.envs.Environment "
            f"(subclass it and implement step(turn) -> Reply)"
        )
    return env


def attach_environment(
    task: Any,
    environment: str | None,
    options: dict[str, Any],
    tools: list[Any],
    episode: dict[str, Any],
) -> Any:
    """`task` with the config's environment (or tools) and episode budgets; a task that is
    multi-turn by itself takes only `episode` (its budgets, overridden field by field)."""
    factory = environment_factory(environment, options, tools)
    own = getattr(task, "episode_budgets", None)
    if factory is None and own is None:
        if episode:
            raise ValueError(
                f"episode {sorted(episode)} applies to multi-turn tasks; task {task.name!r} is "
                f"one-turn: set environment or tools to make it multi-turn"
            )
        return task
    if factory is not None and own is not None:
        raise ValueError(
            f"task {task.name!r} has its own environment; environment and tools apply to "
            f"one-turn tasks (set episode to change its budgets)"
        )
    base = own.to_dict() if own is not None else {}
    task.episode_budgets = EpisodeBudgets.from_dict({**base, **(episode or {})})
    if factory is not None:
        task.environment = lambda problem: factory()
    return task
