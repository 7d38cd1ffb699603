"""Run another framework's environment unmodified as an rlvr `Environment`.

- `TRLEnvironment`: a class written for TRL's `GRPOTrainer(environment_factory=...)`
  (huggingface/trl at f2cd577, trl/trainer/grpo_trainer.py): one instance per episode;
  its public methods are the tools; `reset(**row)` receives the task row's columns;
  an optional `get_reward()` scores the episode from the instance's state.
- `OpenRLHFAgent`: an `AgentInstance` written for OpenRLHF's `--train.agent_func_path`
  (OpenRLHF/OpenRLHF at 3c3be62, openrlhf/utils/agent.py): `reset(states)` with the
  prompt and label, `step(states)` after every policy turn returning the environment's
  feedback text, `done` and `rewards`; either may be `async`.

    environment: rlvr.envs.adapters:TRLEnvironment
    environment_options: {factory: my_envs:IncrementEnv}

Where rlvr's loop differs, the adapter says so instead of guessing:
- rlvr's reward is the outcome reward of the trajectory (the task's verifier or
  `reward_funcs`). The framework's own reward (TRL's `get_reward`, OpenRLHF's step
  `rewards`) is reported per turn as `Reply.reward`, summed into `env/turn_reward`, and
  not trained on; a warning says so once.
- The prompt is the task row's: a TRL `reset` that returns text to add to the prompt, or an
  OpenRLHF `reset` that changes the observation, fails the episode's start, flagged, with
  the reason (rlvr cannot change a prompt the group has already been sampled from).
- A policy turn that ends with EOS is the episode's last and is not stepped (OpenRLHF
  steps it); give OpenRLHF agents the `stop` strings that end a turn instead.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlvr.checks import is_number, resolve_callable
from rlvr.envs.base import Environment, Reply
from rlvr.envs.tools import ToolEnvironment

TRL_RESERVED = ("reset", "get_reward")
NOT_TRAINED = (
    "{name}: the environment's own reward ({what}) is reported per turn as env/turn_reward "
    "and not trained on; rlvr trains on the task's verifier or reward_funcs"
)


def _resolve(reference: Any, field: str) -> Callable[..., Any]:
    if isinstance(reference, str):
        return resolve_callable(reference, field, "class or function")
    if not callable(reference):
        raise ValueError(f"environment_options.{field} must be a class or 'module:Class'")
    return reference


def _run(value: Any) -> Any:
    """The value, awaited when the framework's method was `async`."""
    return asyncio.run(value) if inspect.isawaitable(value) else value


def row_columns(problem: Any) -> dict[str, Any]:
    """A task row as keyword columns: the prompt, the reference answer and a dataset
    row's own columns (rlvr's ideal completion `target` is not a column of the row)."""
    return {"prompt": problem.prompt, "answer": problem.answer, **getattr(problem, "columns", {})}


class TRLEnvironment(Environment):
    """A TRL `environment_factory` class behind rlvr's `ToolEnvironment`: its public
    methods are called as `<method>argument</method>` (a JSON object: keyword arguments)."""

    def __init__(
        self,
        factory: Any,
        observation_format: str = "<result>{result}</result>",
        timeout_s: float = 5.0,
    ) -> None:
        self.instance = _resolve(factory, "factory")()
        methods = {
            name: member
            for name, member in inspect.getmembers(self.instance, predicate=inspect.ismethod)
            if not name.startswith("_") and name not in TRL_RESERVED
        }
        if not callable(getattr(self.instance, "reset", None)):
            raise ValueError(
                f"{type(self.instance).__name__} has no reset method, which TRL's "
                "environment_factory requires"
            )
        self.tools = ToolEnvironment(methods, observation_format, timeout_s)
        self.stop = self.tools.stop
        self._rewarded = callable(getattr(self.instance, "get_reward", None))
        if self._rewarded:
            what = "get_reward"
            warnings.warn(
                NOT_TRAINED.format(name=type(self.instance).__name__, what=what), stacklevel=2
            )
        self._reward_so_far = 0.0

    def reset(self, problem: Any) -> None:
        opening = _run(self.instance.reset(**row_columns(problem)))
        if opening is not None:
            raise ValueError(
                f"{type(self.instance).__name__}.reset returned {str(opening)[:60]!r}: TRL adds "
                "it to the prompt, but rlvr's prompt is the task row's; return None and put "
                "the text in the task's prompts"
            )
        self._reward_so_far = 0.0

    def step(self, turn: str) -> Reply:
        reply = self.tools.step(turn)
        if not self._rewarded:
            return reply
        total = _run(self.instance.get_reward())
        if not is_number(total):
            raise TypeError(f"get_reward returned {total!r}, not a number")
        part, self._reward_so_far = float(total) - self._reward_so_far, float(total)
        return replace(reply, reward=part)  # the parts sum to get_reward() after the last call


class OpenRLHFAgent(Environment):
    """An OpenRLHF `AgentInstance` class: `step` hears each policy turn that ends with
    one of `stop` (or at the turn's token budget) and answers with its feedback text."""

    def __init__(self, agent: Any, stop: list[str] | tuple[str, ...] = ()) -> None:
        self.instance = _resolve(agent, "agent")()
        for method in ("reset", "step"):
            if not callable(getattr(self.instance, method, None)):
                raise ValueError(f"{type(self.instance).__name__} has no {method} method")
        if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"environment_options.stop must be a list of strings, got {stop!r}")
        self.stop = tuple(stop)
        warnings.warn(
            NOT_TRAINED.format(name=type(self.instance).__name__, what="step's rewards"),
            stacklevel=2,
        )

    def reset(self, problem: Any) -> None:
        self.label, self.text = problem.answer, problem.prompt
        states = {"observation": problem.prompt, "label": problem.answer}
        result = _run(self.instance.reset(states))
        observation = result.get("observation") if isinstance(result, dict) else None
        if observation != problem.prompt:
            raise ValueError(
                f"{type(self.instance).__name__}.reset returned observation "
                f"{str(observation)[:60]!r}, not the prompt: rlvr's prompt is the task row's"
            )

    def step(self, turn: str) -> Reply:
        states = {
            "observation_text": self.text,
            "action_text": turn,
            "label": self.label,
            "sampling_params": None,  # rlvr's sampling is the run's, not the agent's
        }
        result = _run(self.instance.step(states))
        feedback, done = result["environment_feedback"], result["done"]
        reward = result.get("rewards", 0.0)
        reward = float(reward.item() if hasattr(reward, "item") else reward)
        self.text += turn + feedback
        return Reply(feedback, done=bool(done), reward=reward)
