"""A user's environment or tools, named in a run's config, on any task.

    environment: my_envs:GuessNumber        # module:Class (or a factory), made per episode
    environment_options: {low: 1, high: 64} # its keyword arguments
    tools: [my_tools:search, my_tools:calc] # or plain functions, behind ToolEnvironment
    tool_format: hermes                     # ... called as the chat model's <tool_call>

A tool entry may also be a mapping, `{factory: module:make_tool, options: {...},
timeout_s: 30}`: `make_tool(**options)` returns the tool (e.g. a search over a corpus
file), made once when the run starts; `timeout_s` is its call's time limit (default 5).
    episode: {max_turns: 6, max_tool_calls: 5, max_observation_tokens: 128}

Either makes the task multi-turn: every episode gets a fresh environment, reset with its
task row. Everything that cannot take effect is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.checks import is_number, resolve_callable
from rlvr.envs.base import Environment
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.chat_tools import ChatToolEnvironment, tool_call_format
from rlvr.envs.checks import check_environment, check_tool
from rlvr.envs.isolated import isolate
from rlvr.envs.notices import FailureNotices, watched
from rlvr.envs.tools import ToolEnvironment, tool_schema


def resolve(reference: Any, field: str) -> Callable[..., Any]:
    """The class or function `module:name` names; errors name the field."""
    return resolve_callable(reference, field, "class or function")


TOOL_TIMEOUT_S = 5.0
"""A tool call's time limit unless its entry sets `timeout_s`."""
TOOL_KEYS = ("factory", "options", "timeout_s")


def make_tools(
    tools: list[Any], build: bool = True, tool_format: str = "tags"
) -> tuple[list[Any], list[float]]:
    """The tool functions of the config's `tools` entries and their time limits, each
    checked to be callable the way `tool_format` calls it (`rlvr.envs.checks`). With
    `build` false (checking a config), factories are imported, not called: None stands for
    each of their tools."""
    functions, timeouts = [], []
    for i, entry in enumerate(tools):
        if not isinstance(entry, dict):
            functions.append(resolve(entry, f"tools[{i}]"))
            check_tool(functions[-1], f"tools[{i}] {entry!r}", tool_format)
            timeouts.append(TOOL_TIMEOUT_S)
            continue
        unknown = sorted(set(entry) - set(TOOL_KEYS))
        if unknown or "factory" not in entry:
            raise ValueError(
                f"tools[{i}] {entry!r}: a mapping takes factory (required), options and "
                f"timeout_s; unknown: {unknown}"
            )
        timeout = entry.get("timeout_s", TOOL_TIMEOUT_S)
        if not is_number(timeout) or timeout <= 0:
            raise ValueError(f"tools[{i}].timeout_s must be a number > 0, got {timeout!r}")
        options = entry.get("options") or {}
        if not isinstance(options, dict):
            raise ValueError(f"tools[{i}].options must be a mapping, got {options!r}")
        factory = resolve(entry["factory"], f"tools[{i}].factory")
        functions.append(factory(**options) if build else None)
        if build:
            check_tool(functions[-1], f"tools[{i}] (made by {entry['factory']})", tool_format)
        timeouts.append(float(timeout))
    return functions, timeouts


def environment_factory(
    environment: str | None,
    options: dict[str, Any],
    tools: list[Any],
    tool_format: str = "tags",
    build: bool = True,
) -> Callable[[], Environment] | None:
    """What makes one episode's environment from the config's fields; None when neither
    `environment` nor `tools` is set. `tool_format` "tags" calls tools as
    `<name>argument</name>`; a chat format (`rlvr.envs.chat_tools`) as `<tool_call>`."""
    if tool_format != "tags":
        tool_call_format(tool_format)  # an unknown format is named with the valid ones
        if not tools:
            raise ValueError(f"tool_format {tool_format!r} applies to tools; set tools")
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
        functions, timeouts = make_tools(tools, build, tool_format)
        if not build:
            return lambda: None  # a config being checked: no episode runs
        limits = {fn.__name__: t for fn, t in zip(functions, timeouts, strict=True)}
        if tool_format != "tags":
            return lambda: ChatToolEnvironment(functions, tool_format, limits)
        if len(set(timeouts)) > 1:
            raise ValueError(
                f"tool_format tags runs every tool under one time limit; tools set "
                f"timeout_s {sorted(set(timeouts))}: make them equal"
            )
        return lambda: ToolEnvironment(functions, timeout_s=timeouts[0])
    if environment is None:
        if options:
            raise ValueError(f"environment_options {sorted(options)} need environment set")
        return None
    cls = resolve(environment, "environment")
    check_environment(cls, options, environment)
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
    tool_format: str = "tags",
    build: bool = True,
) -> Any:
    """`task` with the config's environment (or tools) and episode budgets; a task that is
    multi-turn by itself takes only `episode` (its budgets, overridden field by field).
    With a chat `tool_format`, `task.tool_schemas` lists the tools for the chat template.
    `build` false checks the fields without making the tools (`make_tools`)."""
    factory = environment_factory(environment, options, tools, tool_format, build)
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
    budgets = task.episode_budgets
    if budgets.env_isolation == "process" and build and not hasattr(task.environment, "isolated"):
        task.environment = isolate(task.environment, budgets.env_timeout_s, budgets.env_memory_mb)
    if factory is not None:  # the user's environment or tools: their failures are printed
        name = environment if environment is not None else f"tools {_names(tools)}"
        notices = FailureNotices(name, budgets.env_errors)
        task.environment = watched(task.environment, notices, _origin(environment))
    if tools:
        _check_tool_limits(tools, task.episode_budgets)
    if tool_format != "tags" and build:
        task.tool_schemas = [tool_schema(fn) for fn in factory().tools.values()]
    return task


def _names(tools: list[Any]) -> str:
    return "[" + ", ".join(str(e["factory"] if isinstance(e, dict) else e) for e in tools) + "]"


def _origin(environment: str | None) -> Any:
    """The user's class or factory (where a failure to make one is shown to come from)."""
    return None if environment is None else resolve(environment, "environment")


def _check_tool_limits(tools: list[Any], budgets: EpisodeBudgets) -> None:
    """A tool's limit must fall inside the environment's (`env_timeout_s`), or the step
    would fail as the environment's fault before the tool's limit could answer."""
    longest = max(
        e.get("timeout_s", TOOL_TIMEOUT_S) if isinstance(e, dict) else TOOL_TIMEOUT_S for e in tools
    )
    if budgets.env_timeout_s and longest >= budgets.env_timeout_s:
        raise ValueError(
            f"episode.env_timeout_s={budgets.env_timeout_s:g} must exceed the longest tool "
            f"time limit ({longest:g}s); raise episode.env_timeout_s"
        )
