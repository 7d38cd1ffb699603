"""The household world as an rlvr environment, and the same play read back from text.

The text protocol is ALFWorld's own (as in ReAct's prompts): the prompt ends with ``>``,
the policy writes one command and a newline (`` go to fridge 1\\n``: the newline ends its
turn), and the environment answers with the observation and a new ``>``
(``You arrive at fridge 1. The fridge 1 is closed.\\n>``). A command that is not
admissible answers ``Nothing happens.`` and counts as invalid. The episode ends when the
goal is reached (the last observation has no ``>``) or after `max_steps` commands.

Reward, as agentic-rl-lab's 08-alfworld: ``won − 0.1·invalid_actions``. Each `Reply`
carries its part (`env/turn_reward`); `replay_text` recomputes won and the invalid count
from a trajectory's text alone, so the task's verifier and reward function need nothing
but the completion and the game id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.envs.household.catalog import kind_of
from rlvr.envs.household.games import intro
from rlvr.envs.household.world import NOTHING_HAPPENS, Game, World, replay

INVALID_PENALTY = 0.1
"""Reward lost per invalid command (08-alfworld's INVALID_ACTION_PENALTY)."""
PROMPT_MARK = ">"
ADMISSIBLE = "Admissible commands: "
LONGEST_SKIP = 64
"""Characters a sampled token may run past the newline that ended its turn (a byte-level
token such as ``\\n\\n``); `replay_text` looks that far for the observation."""


def canonical(turn: str) -> str:
    """A turn as a command, as 08-alfworld's `canonical_action`: lower case, single spaces."""
    return " ".join(turn.strip().lower().split())


def prompt_text(game: Game, show_admissible: bool = False, compact: bool = False) -> str:
    """The episode's prompt: the opening observation, the goal, and the first ``>`` (after
    the admissible commands, when shown). `compact`: `compact_prompt`."""
    if compact:
        return compact_prompt(game)
    admissible = World(game).admissible() if show_admissible else None
    return observation_text(intro(game), False, admissible)


def compact_prompt(game: Game) -> str:
    """The compact text mode's prompt: the room, the goal, and where the objects the expert
    fetches (and the lamp) start, which the expert knows and ALFWorld's opening does not
    say: ``kitchen: put a hot mug in garbagecan. mug 1 in cabinet 2.\\n>``."""
    world = World(game)
    wanted = [o for held in game.contents for o in held if kind_of(o) == game.goal.obj]
    wanted = wanted[: 2 if game.goal.task_type == "pick_two_obj_and_place" else 1]
    if game.goal.lamp is not None:
        wanted += sorted(game.lamps)
    where = ", ".join(f"{o} in {world.where(o)}" for o in wanted)
    return f"{game.room}: {game.goal.sentence()} {where}.\n{PROMPT_MARK}"


def compact_observation(observation: str) -> str:
    """The compact text mode's observation: what is seen (``egg 1, mug 1.``,
    ``nothing.``), ``closed.``, ``Nothing happens.``, or ``ok.`` for a command that
    changed something; what is carried or examined stays as it is."""
    if observation == NOTHING_HAPPENS:
        return observation
    if "you see " in observation:
        seen = observation.rsplit("you see ", 1)[1].removesuffix(".").replace(", and ", ", ")
        return ", ".join(item.removeprefix("a ") for item in seen.split(", ")) + "."
    if observation.endswith(" is closed."):
        return "closed."
    if observation.startswith(("You are", "This is", "There's")):
        return observation
    return "ok."


def observation_text(observation: str, done: bool, admissible: list[str] | None = None) -> str:
    """What follows a command: the observation, then (as 08-alfworld's
    `include_admissible_actions`) the admissible commands if given, then ``\\n>``; only
    the observation when the episode ended."""
    if done:
        return observation
    shown = "" if admissible is None else f"\n{ADMISSIBLE}{', '.join(admissible)}"
    return f"{observation}{shown}\n{PROMPT_MARK}"


class HouseholdEnvironment(Environment):
    """One game: each newline-ended turn is a command; done when won or out of steps.
    `actions`: start after them (replayed from the game's start, `replay`), as a saved
    mid-game state resumes; they count towards `max_steps`."""

    stop = ("\n",)

    def __init__(
        self,
        game: Game,
        max_steps: int = 50,
        show_admissible: bool = False,
        compact: bool = False,
        actions: Sequence[str] = (),
    ) -> None:
        self.world, self.max_steps = replay(game, list(actions)), max_steps
        self.show_admissible, self.compact = show_admissible, compact

    def step(self, turn: str) -> Reply:
        action = canonical(turn)
        observation, valid = self.world.step(action)
        won = self.world.won()
        done = won or self.world.state.steps >= self.max_steps
        shown = self.world.admissible() if self.show_admissible else None
        said = compact_observation(observation) if self.compact else observation
        text = observation_text(said, done, shown)
        # A turn cut by its token budget hears no newline: add it, so the text reads as
        # if the policy had ended the turn (`replay_text` depends on it).
        text = text if turn.endswith("\n") else "\n" + text
        reward = float(won) - (0.0 if valid else INVALID_PENALTY)
        return Reply(
            text, done, tool_call=valid, invalid_call=not valid, reward=reward, call=action
        )


@dataclass(frozen=True)
class Outcome:
    won: bool
    invalid: int
    steps: int
    actions: tuple[str, ...]

    @property
    def reward(self) -> float:
        """``won − 0.1·invalid_actions``."""
        return float(self.won) - INVALID_PENALTY * self.invalid


def replay_text(game: Game, completion: str, max_steps: int | None = None) -> Outcome:
    """Play `completion` (policy turns and observations, as an episode's text) again from
    the game's start. A turn counts when an observation follows it: the text's last
    newline-ended turn with nothing after it was never answered (the budget ran out).
    `max_steps` as the episode's (None: as many as the text holds; an episode's text never
    holds more than its own)."""
    return replay_world(World(game), completion, max_steps)


def replay_world(world: Any, completion: str, max_steps: int | None = None) -> Outcome:
    """`replay_text` on a fresh world of any engine with the household surface (`step`,
    `won`, `state.steps`/`state.invalid`): the embedded games and real ALFWorld ones."""
    limit = max_steps if max_steps is not None else len(completion) + 1
    position, actions = 0, []
    while not world.won() and world.state.steps < limit:
        end = completion.find("\n", position)
        if end < 0 or end + 1 >= len(completion):
            break  # the last turn: an answer, or cut by the budget, never stepped
        action = canonical(completion[position:end])
        observation, _ = world.step(action)
        actions.append(action)
        done = world.won() or world.state.steps >= limit
        position = _after_observation(completion, end + 1, observation, done, world)
        if position < 0:
            break  # the observation was cut: the trajectory ends inside it
    s = world.state
    return Outcome(world.won(), s.invalid, s.steps, tuple(actions))


def _after_observation(
    completion: str, start: int, observation: str, done: bool, world: World
) -> int:
    """Where the observation that should follow `start` ends (with or without the
    admissible commands shown, in full or compact text), or -1 when it is not there whole."""
    forms = [(observation, None), (observation, world.admissible())]
    forms += [(compact_observation(observation), shown) for _, shown in forms]
    for said, shown in forms:
        expected = observation_text(said, done, shown)
        found = completion.find(expected, start, start + LONGEST_SKIP + len(expected))
        if found >= 0:
            return found + len(expected)
    return -1
