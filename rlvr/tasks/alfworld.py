"""Real ALFWorld games as a task: win the game, scored by replaying the trajectory's text.

The problems are the games `rlvr.envs.alfworld.find_games` keeps (ALFWorld's own
selection) under ``task_options.data_root``, else ``$ALFWORLD_DATA``; rlvr's splits are
ALFWorld's (`ALFWORLD_SPLIT`): train → ``train``, dev → ``valid_seen`` (evaluation rooms
seen in training), eval → ``valid_unseen`` (floorplans never seen). Each problem's prompt
is the game's opening text ending with ``>`` (`prompt_text`), its answer the game id (its
folder under the data root), its target empty (no walkthrough text: no warm start), and
its columns the task type and the game file, so that reward functions see them.

The environment is `AlfworldEnvironment`, attached by the task as the household task
attaches its own; the verifier replays the trajectory's text from the game's start
(`replay_text`), and a completion is correct when the replayed game is won. The lab's
reward, ``won − 0.1·invalid``, is ``rlvr.envs.alfworld:won_minus_invalid`` (it reads the
game file from the problem's column, so it needs no ``$ALFWORLD_DATA``).

Needs the ``alfworld`` extra; the games are not shipped (docs/22-alfworld.md).
"""

from __future__ import annotations

import importlib.util
import os
import random
import string
from pathlib import Path
from typing import Any

from rlvr.checks import check_int
from rlvr.envs.alfworld import (
    ENV_VAR,
    AlfworldEnvironment,
    AlfworldWorld,
    data_root,
    find_games,
    game_path,
    prompt_text,
    replay_text,
)
from rlvr.tasks.base import Problem, Task, alphabet_of, check_split
from rlvr.tasks.dataset_task import DataProblem
from rlvr.tasks.household import checked_game_options, game_budgets, outcome_verdict
from rlvr.verify import Verdict

ALFWORLD_SPLIT = {"train": "train", "dev": "valid_seen", "eval": "valid_unseen"}
"""rlvr's split → ALFWorld's: the lab evaluates on valid_seen (140) and valid_unseen (134)."""
EXTRA = ("alfworld", "textworld")
MISSING = (
    "task alfworld needs the alfworld extra: pip install -e '.[alfworld]' "
    "(alfworld and textworld[pddl]); missing: {name}"
)
EPISODE_BUDGET = 8000
"""Default `max_new_tokens`, all of an episode's commands and observations: ALFWorld's
expert needs up to ~20 commands, an observation up to a few hundred tokens, and a policy
that errs takes more (the lab cuts an episode at 12K tokens of context)."""


class AlfworldTask(Task):
    """Win a real ALFWorld game within `max_steps` commands."""

    name = "alfworld"
    loads_data = True
    verify_timeout_s = 60.0
    """A replay loads the game's engine (~0.2-1 s measured on a handmade game) and plays up
    to `max_steps` commands: far from household's 1 s default."""

    def __init__(
        self,
        data_root: str | None = None,
        task_types: list[str] | None = None,
        max_steps: int = 50,
        show_admissible: bool = False,
        seed: int = 0,
        train_size: int | None = None,
        dev_size: int | None = None,
        eval_size: int | None = None,
        max_observation_tokens: int | None = None,
        max_turn_tokens: int | None = 48,
        env_errors: str = "drop",
    ) -> None:
        """
        Args:
            data_root: the folder of ALFWorld's games (or its ``json_2.1.1`` subfolder);
                None: ``$ALFWORLD_DATA``.
            task_types: ALFWorld task types to keep (None: all six, `TASK_TYPES`).
            max_steps: commands before the game is lost, 1 to 200 (08-alfworld: 50).
            show_admissible: list the admissible commands after every observation and in
                the prompt (08-alfworld's `include_admissible_actions`).
            seed, train_size, dev_size, eval_size: None: every game of the split, in id
                order; a number: that many, drawn by a shuffle seeded by `seed` (ids sort
                by task type, so a prefix would hold one type).
            max_observation_tokens, max_turn_tokens, env_errors: as for household.
        """
        for module in EXTRA:
            if importlib.util.find_spec(module) is None:
                raise ValueError(MISSING.format(name=module))
        self.root = _root(data_root)
        kinds, self.max_steps, self.show_admissible = checked_game_options(
            task_types, max_steps, show_admissible
        )
        self.task_types = list(kinds)
        self.seed = check_int("seed", seed, 0)
        sizes = {"train": train_size, "dev": dev_size, "eval": eval_size}
        self.sizes = {s: n if n is None else check_int(f"{s}_size", n, 0) for s, n in sizes.items()}
        self.episode_budgets = game_budgets(
            max_steps, show_admissible, max_observation_tokens, max_turn_tokens, env_errors
        )
        self._splits: dict[str, list[Problem]] = {}

    def problems(self, split: str) -> list[Problem]:
        check_split(split)
        if split not in self._splits:
            self._splits[split] = self._load(split)
        return list(self._splits[split])

    def _load(self, split: str) -> list[Problem]:
        """The split's games as problems; each prompt plays the game's opening (~0.2 s)."""
        size, alfworld_split = self.sizes[split], ALFWORLD_SPLIT[split]
        if size == 0:
            return []
        games = find_games(self.root, alfworld_split, self.task_types)
        if not games:
            raise ValueError(
                f"task alfworld: no games for split {split!r} (ALFWorld's {alfworld_split!r}) "
                f"under {str(self.root)!r} (task_options.data_root, else ${ENV_VAR}): expected "
                f"{alfworld_split}/<task type>-.../<trial>/game.tw-pddl marked solvable, "
                f"beside traj_data.json, of task types {', '.join(self.task_types)}"
            )
        if size is not None:
            if size > len(games):
                raise ValueError(
                    f"{split}_size is {size}, but ALFWorld's {alfworld_split!r} has "
                    f"{len(games)} games; use 1 to {len(games)}, or null for all"
                )
            games = random.Random(self.seed).sample(games, size)
        return [
            DataProblem(
                f"{self.name}/{split}/{i}",
                prompt_text(AlfworldWorld(game.game_file), self.show_admissible),
                game.game_id,
                "",
                columns={"task_type": game.task_type, "game_file": str(game.game_file)},
            )
            for i, game in enumerate(games)
        ]

    def environment(self, problem: Problem) -> Any:
        return AlfworldEnvironment(str(self.root), self.max_steps, self.show_admissible)

    def check(self, problem: Problem, completion: str) -> Verdict:
        game_file = game_path(self.root, problem.answer)
        return outcome_verdict(replay_text(game_file, completion, self.max_steps))

    @property
    def longest_target_chars(self) -> int:
        return 0  # no targets: ALFWorld's games are played, not imitated, here

    @property
    def default_max_new_tokens(self) -> int:
        return EPISODE_BUDGET

    @property
    def alphabet(self) -> str:
        """ALFWorld's text is printable ASCII; listed without reading every game."""
        return alphabet_of(string.ascii_letters, string.digits, string.punctuation, " \n")


def _root(given: str | None) -> Path:
    """`data_root`, else ``$ALFWORLD_DATA``, as an absolute folder (its ``json_2.1.1``
    subfolder when it has one), with errors that name the option and the variable."""
    path = given if given is not None else os.environ.get(ENV_VAR)
    if not path:
        raise ValueError(
            f"task alfworld: task_options.data_root is not set and ${ENV_VAR} is empty; set "
            "one to the folder of ALFWorld's games (the one alfworld-download fills)"
        )
    if not Path(path).expanduser().is_dir():
        source = "task_options.data_root" if given is not None else f"${ENV_VAR}"
        raise ValueError(f"task alfworld: {source} is {str(path)!r}, which is not a folder")
    return data_root(Path(path).expanduser().resolve())
