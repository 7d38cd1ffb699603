"""Household games in ALFWorld's command language: an embedded stand-in for 08-alfworld.

Each problem is one game of `rlvr.envs.household` (docs/household.md): the prompt is
ALFWorld's opening observation and goal ending with ``>``; the policy writes one command
per turn (`` go to fridge 1\\n``) and reads the observation; the game ends won or after
``max_steps`` commands. The problem's answer is the game id (``<task type>/<seed>``), from
which the verifier and `won_minus_invalid` rebuild the game and replay the trajectory's
text. The target is the expert walkthrough with its observations (a warm start leaves the
observations out of its loss: `observation_spans`).

Scoring: correct when the replayed game is won. The lab's reward, ``won − 0.1·invalid``,
is the reward function ``rlvr.tasks.household:won_minus_invalid``.
"""

from __future__ import annotations

import random
import string
from typing import Any, ClassVar

from rlvr.checks import check_int
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.household import (
    TASK_TYPES,
    HouseholdEnvironment,
    compact_observation,
    game_from_id,
    make_game,
    prompt_text,
    replay_text,
    walkthrough,
)
from rlvr.envs.household.environment import observation_text
from rlvr.envs.household.world import World
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict

TEXT_MODES = ("full", "compact")
COMPACT_POSITIONS = 768
"""Context of the embedded model for the compact text: the longest prompt and walkthrough
of the default splits together (measured: at most 512 characters) with room for slack."""
COMPACT_MODEL = {"hidden": 64, "layers": 2, "intermediate": 256, "max_positions": COMPACT_POSITIONS}
"""The embedded model for the compact text: the default at half width and depth, as the
tiny VLM's language side (a training step on 16 episodes of ~300 characters takes ~1-2 s
on one busy core instead of ~13 s at full size: docs/household.md)."""


class HouseholdTask(SyntheticTask):
    """Win a generated household game within `max_steps` commands."""

    name = "household"
    embedded_warm_start: ClassVar[dict[str, Any]] = {
        "batch_size": 16,
        "lr": 3e-3,
        "eval_every": 100,
    }
    """The embedded warm start's schedule on this task (`rlvr.warmstart.load_policy`):
    16 episodes of ~300 characters a step, at 3× the default rate, dev checked every 100
    steps (a check plays 100 episodes of several turns: docs/household.md)."""

    def __init__(
        self,
        task_types: list[str] | None = None,
        max_steps: int = 50,
        show_admissible: bool = False,
        seed: int = 0,
        train_size: int = 2000,
        dev_size: int = 100,
        eval_size: int = 200,
        max_observation_tokens: int | None = None,
        max_turn_tokens: int | None = 48,
        env_errors: str = "drop",
        text: str = "full",
    ) -> None:
        """
        Args:
            task_types: ALFWorld task types to draw from (None: all six, `TASK_TYPES`).
            max_steps: commands before the game is lost, 1 to 200 (08-alfworld: 50).
            show_admissible: list the admissible commands after every observation and in
                the prompt, as 08-alfworld's `include_admissible_actions` (its default).
            seed, train_size, dev_size, eval_size: as for arithmetic; a game (task type,
                game seed) is never in two splits.
            max_observation_tokens: None: 512, or 1024 with `show_admissible`, which hold
                the longest observation whole (under 512 and 900 characters), so
                `replay_text` reads every observation back.
            max_turn_tokens: tokens of one command (the longest is under 48 characters).
            env_errors: as for calculator.
            text: "full" (ALFWorld's text) or "compact": the room, the goal and where the
                goal's objects start as the prompt, terse observations (`compact_observation`),
                so an episode fits the embedded model's context (`embedded_model`).
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        self.task_types, self.max_steps, self.show_admissible = checked_game_options(
            task_types, max_steps, show_admissible
        )
        if text not in TEXT_MODES:
            raise ValueError(f"text is {text!r}; valid text modes are {', '.join(TEXT_MODES)}")
        self.compact = text == "compact"
        self.episode_budgets = game_budgets(
            max_steps, show_admissible, max_observation_tokens, max_turn_tokens, env_errors
        )

    @property
    def embedded_model(self) -> dict[str, Any]:
        """`model_options` of the embedded policy's warm start on this task: for the compact
        text, `COMPACT_MODEL`; the full text (prompt and walkthrough up to ~1,400
        characters) needs 2,048 positions."""
        return dict(COMPACT_MODEL) if self.compact else {"max_positions": 2048}

    def environment(self, problem: Problem) -> Any:
        game = game_from_id(problem.answer)
        return HouseholdEnvironment(game, self.max_steps, self.show_admissible, self.compact)

    def sample(self, rng: random.Random) -> Draft:
        task_type, seed = rng.choice(self.task_types), rng.randint(0, 999_999)
        game = make_game(seed, task_type)
        prompt = prompt_text(game, self.show_admissible, self.compact)
        target = walkthrough_text(game, self.show_admissible, self.compact)
        return Draft(game.game_id, prompt, game.game_id, target)

    def observation_spans(self, target: str) -> list[tuple[int, int]]:
        """Character spans of the observations in a target (each from after a command's
        newline to its ``>`` or the end): the warm start leaves them out of its loss."""
        spans, position = [], 0
        while (end := target.find("\n", position)) >= 0:
            mark = target.find(">", end)
            spans.append((end + 1, len(target) if mark < 0 else mark + 1))
            position = len(target) if mark < 0 else mark + 1
        return spans

    def check(self, problem: Problem, completion: str) -> Verdict:
        return outcome_verdict(
            replay_text(game_from_id(problem.answer), completion, self.max_steps)
        )

    @property
    def longest_target_chars(self) -> int:
        return max(
            len(p.target) for split in ("train", "dev", "eval") for p in self.problems(split)
        )

    @property
    def alphabet(self) -> str:
        return alphabet_of(string.ascii_letters, string.digits, " .,:/-!='>\n")


def walkthrough_text(game: Any, show_admissible: bool = False, compact: bool = False) -> str:
    """The expert's play as an episode's text: `` command\\n`` then the observation."""
    world, text, plan = World(game), "", walkthrough(game)
    for i, action in enumerate(plan):
        observation, _ = world.step(action)
        observation = compact_observation(observation) if compact else observation
        shown = world.admissible() if show_admissible else None
        text += f" {action}\n" + observation_text(observation, i == len(plan) - 1, shown)
    return text


def won_minus_invalid(
    prompts: list[str], completions: list[str], reference: list[str], **_: Any
) -> list[float]:
    """08-alfworld's reward, ``won − 0.1·invalid_actions``, replayed from each trajectory's
    text (the reference is the game id)."""
    return [
        replay_text(game_from_id(ref), text).reward
        for text, ref in zip(completions, reference, strict=True)
    ]


def checked_game_options(
    task_types: Any, max_steps: Any, show_admissible: Any
) -> tuple[tuple[str, ...], int, bool]:
    """The options every ALFWorld-language task shares (household, alfworld), validated:
    the task types to keep (None: all six), the commands per game (1–200), and whether the
    prompt lists the admissible commands."""
    kinds = tuple(task_types or TASK_TYPES)
    for i, kind in enumerate(kinds):
        if kind not in TASK_TYPES:
            raise ValueError(
                f"task_types[{i}] is {kind!r}; valid task types are {', '.join(TASK_TYPES)}"
            )
    steps = check_int("max_steps", max_steps, 1, 200)
    if not isinstance(show_admissible, bool):
        raise ValueError(f"show_admissible must be true or false, got {show_admissible!r}")
    return kinds, steps, show_admissible


def game_budgets(
    max_steps: int,
    show_admissible: bool,
    max_observation_tokens: int | None,
    max_turn_tokens: int,
    env_errors: str,
) -> EpisodeBudgets:
    """An ALFWorld-language game's episode budgets (household, alfworld): `max_steps`
    commands, the environment hearing the last one; an observation's tokens default to 512,
    1024 when it lists the admissible commands."""
    if max_observation_tokens is None:
        max_observation_tokens = 1024 if show_admissible else 512
    return EpisodeBudgets(
        max_turns=max_steps + 1,  # the environment hears the last command (and ends)
        max_tool_calls=max_steps,
        max_observation_tokens=max_observation_tokens,
        max_turn_tokens=max_turn_tokens,
        env_errors=env_errors,
    )


def outcome_verdict(outcome: Any) -> Verdict:
    """A replayed game's verdict (household, alfworld): correct when won; formatted when a
    turn was played; the extracted answer is the number of turns."""
    reason = (
        f"won in {outcome.steps} steps, {outcome.invalid} invalid"
        if outcome.won
        else f"not won after {outcome.steps} steps, {outcome.invalid} invalid"
    )
    return Verdict(outcome.won, outcome.steps > 0, str(outcome.steps), reason=reason)
