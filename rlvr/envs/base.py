"""What an environment is: it answers the policy's turns until the episode ends.

An episode starts from a task row (`Problem`) and alternates policy turns and environment
replies. A policy turn ends when the policy emits EOS, when its text ends with one of the
environment's `stop` strings (a tool call's closing tag), or at the turn's token budget.
The environment then answers with a `Reply`: an observation inserted into the context
(never trained on, never counted: docs/algorithms.md §9) and whether the episode is done.
A turn that ends with EOS is the policy's final answer: the episode ends without asking.
The task's verifier scores the whole trajectory's text (its last answer counts).

One environment object serves one episode (`Task.environment(problem)` makes it), so it
may keep state between turns, as TRL's `environment_factory` and OpenRLHF's agent
`reset`/`step` do (docs/agentic.md maps the three).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one policy turn."""

    observation: str = ""
    """Text inserted after the turn, as context for the next one ("" for none)."""
    done: bool = False
    """The episode ends after this turn (the observation, if any, is still inserted)."""
    tool_call: bool = False
    """The turn was a tool call that the environment recognised and ran."""
    invalid_call: bool = False
    """The turn tried a tool call that could not be parsed or named no known tool."""
    tool_error: str | None = None
    """The tool ran and failed: "error" (it raised) or "timeout"; the observation says so."""
    reward: float = 0.0
    """A per-turn part of the reward, reported (`env/turn_reward`) and not trained on: the
    reward of an episode is the outcome reward of its whole trajectory (the task's
    verifier or `reward_funcs`); a reward function can read these parts if it wants them."""
    call: str | None = None
    """The tool call as the environment read it (e.g. `<calc>12*7</calc>`), kept per turn
    for the completions table (`EpisodeRecord.calls`); None when the turn made none."""


class Environment(ABC):
    """One episode's environment: override `step` (and `stop`, `reset` if needed)."""

    stop: tuple[str, ...] = ()
    """Strings that end a policy turn besides EOS (e.g. a tool call's closing tag)."""

    def reset(self, problem: Any) -> None:
        """Called once before the first turn with the episode's task row."""
        self.problem = problem

    @abstractmethod
    def step(self, turn: str) -> Reply:
        """Answer one policy turn that ended with a `stop` string or at its token budget."""
