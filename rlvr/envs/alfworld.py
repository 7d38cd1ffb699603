"""Real ALFWorld text games from a user's data root, played as the household world is played.

ALFWorld (Shridhar et al. 2021, arXiv 2010.03768) stores each text game as a folder
``<split>/<task type>-<object>-<mrecep>-<receptacle>-<scene>/<trial>/`` holding
``game.tw-pddl`` (JSON: ``pddl_domain``, ``grammar`` with the goal written in,
``pddl_problem``, ``solvable``, ``walkthrough``) and ``traj_data.json`` (``task_type``,
``pddl_params``, ...). TextWorld's PDDL engine plays a game with ALFWorld's name demangler
(``countertop_bar__plus_00_dot_10...`` → ``countertop 1``), as ALFWorld's own
``AlfredTWEnv`` and agentic-rl-lab's 08-alfworld (``environment.py``) do.

`AlfworldWorld` has the household `World`'s surface (`goal`, `admissible()`,
`step(action) → (observation, valid)`, `won()`, step and invalid counts) and
`AlfworldEnvironment` its text protocol (`rlvr.envs.household.environment`): the policy
writes one command and a newline, the environment answers with the observation and ``>``.
Reward, as 08-alfworld's: ``won − 0.1·invalid_actions`` (`won_minus_invalid`).

Where it follows 08-alfworld rather than TextWorld: a command counts as invalid when it is
not among the admissible commands of the state it was given in (TextWorld answers
``Nothing happens.`` and does not say); ``help``, which ALFWorld admits, is valid but not
listed (08-alfworld's ``_available_actions``). The engine's ``max_episode_steps`` is not
used: `max_steps` ends the episode, as in the household world. One thread at a time:
TextWorld's grammar parsers are module-level (08-alfworld locks around them), and rlvr's
episodes step their environments one after another.

Needs the ``alfworld`` extra (``pip install 'rlvr[alfworld]'``: alfworld and
textworld[pddl], which builds Fast Downward from source). The games are not shipped: point
`data_root` or ``$ALFWORLD_DATA`` at the folder ``alfworld-download`` fills.
"""

from __future__ import annotations

import json
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.envs.household.catalog import TASK_TYPES
from rlvr.envs.household.environment import (
    INVALID_PENALTY,
    Outcome,
    canonical,
    observation_text,
    replay_world,
)

ENV_VAR = "ALFWORLD_DATA"
SPLITS = ("train", "valid_seen", "valid_unseen")
"""ALFWorld's splits: train, and evaluation on seen and unseen floorplans."""
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
TASK_MARK = "Your task is to: "
HELP = "help"
MISSING = (
    "rlvr.envs.alfworld needs the alfworld extra: pip install 'rlvr[alfworld]' "
    "(alfworld and textworld[pddl]); missing: {name}"
)


def data_root(path: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds the splits: `path`, else ``$ALFWORLD_DATA``; its ``json_2.1.1``
    subfolder when it has one (the layout ``alfworld-download`` writes)."""
    given = path if path is not None else os.environ.get(ENV_VAR)
    if not given:
        raise ValueError(
            f"data_root is not set and ${ENV_VAR} is empty: name the folder of ALFWorld's "
            "games (the one alfworld-download fills, or its json_2.1.1 subfolder)"
        )
    root = Path(given).expanduser()
    if not root.is_dir():
        raise ValueError(f"data_root {str(root)!r} is not a folder")
    nested = root / "json_2.1.1"
    return nested if nested.is_dir() else root


@dataclass(frozen=True)
class AlfworldGame:
    game_id: str
    """The game's folder relative to the data root (``train/pick_and_place_simple-.../trial_T0``)."""
    game_file: Path
    task_type: str


def find_games(
    root: str | os.PathLike[str] | None, split: str, task_types: list[str] | None = None
) -> list[AlfworldGame]:
    """The split's playable games, sorted by id, chosen as ALFWorld's
    ``AlfredTWEnv.collect_game_files`` chooses them: a ``traj_data.json`` beside a
    ``game.tw-pddl`` marked ``solvable``, of one of `task_types` (None: all six), and no
    movable-receptacle or sliced games."""
    if split not in SPLITS:
        raise ValueError(f"split is {split!r}; valid splits are {', '.join(SPLITS)}")
    wanted = tuple(task_types or TASK_TYPES)
    for i, kind in enumerate(wanted):
        if kind not in TASK_TYPES:
            raise ValueError(f"task_types[{i}] is {kind!r}; valid: {', '.join(TASK_TYPES)}")
    base = data_root(root)
    games = []
    for game_file in sorted((base / split).rglob(GAME_FILE)):
        folder = game_file.parent
        if "movable" in str(folder) or "Sliced" in str(folder):
            continue
        traj = folder / TRAJ_FILE
        if not traj.is_file():
            continue
        task_type = json.loads(traj.read_text()).get("task_type")
        if task_type in wanted and json.loads(game_file.read_text()).get("solvable"):
            games.append(AlfworldGame(folder.relative_to(base).as_posix(), game_file, task_type))
    return games


def game_path(root: str | os.PathLike[str] | None, game_id: str) -> Path:
    """The ``game.tw-pddl`` of `game_id`: a folder relative to the data root, or an absolute
    path to the folder or the file."""
    path = Path(game_id)
    if not path.is_absolute():
        path = data_root(root) / path
    path = path if path.name == GAME_FILE else path / GAME_FILE
    if not path.is_file():
        raise ValueError(f"ALFWorld game {game_id!r}: no {GAME_FILE} at {str(path)!r}")
    return path


_LIBRARIES: list[Any] = []
"""Copies of Fast Downward's library whose world was collected, for the next world."""


def _engine(game_file: Path) -> tuple[Any, Any]:
    """TextWorld's PDDL engine on one game, with ALFWorld's demangled names, and the copy
    of Fast Downward's library it plays on.

    TextWorld's `PddlEnv` loads a private copy of the library for every engine (the
    library keeps its planning task in globals) and never unloads it: +1 MB resident and
    5 mappings a game, for good (measured), and unloading it (`close_lib`) crashes the
    interpreter at exit. So the engine here takes a copy that a collected world left, if
    any: a process holds as many copies as it ever had worlds alive at once, and one more
    (TatSu's parse memo keeps the last world alive until the next parse)."""
    try:
        import fast_downward
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv
    except ImportError as error:
        raise ImportError(MISSING.format(name=error.name)) from error

    class PooledPddlEnv(PddlEnv):
        def __init__(self, infos: Any, library: Any) -> None:
            textworld.Environment.__init__(self, infos)  # PddlEnv's own, but the library
            self.downward_lib = library

    library = _LIBRARIES.pop() if _LIBRARIES else fast_downward.load_lib()
    infos = textworld.EnvInfos(admissible_commands=True, won=True)
    engine = AlfredDemangler(PooledPddlEnv(infos, library), shuffle=False)
    engine.load(str(game_file))
    return engine, library


@dataclass(frozen=True)
class Counts:
    steps: int = 0
    invalid: int = 0


class AlfworldWorld:
    """One ALFWorld game in play: `step(action)` → (observation, valid)."""

    def __init__(self, game_file: str | os.PathLike[str]) -> None:
        self.game_file = Path(game_file)
        self._engine, library = _engine(self.game_file)
        # The library goes back to the pool when the world is collected (`_engine`).
        weakref.finalize(self, _LIBRARIES.append, library)
        self._game_state = self._engine.reset()
        self.intro: str = self._game_state.feedback
        """ALFWorld's opening text: the room at a glance, then ``Your task is to: …``."""
        self.state = Counts()

    @property
    def goal(self) -> str:
        """The goal sentence, as 08-alfworld's `extract_task` reads it from the opening."""
        start = self.intro.find(TASK_MARK)
        if start < 0:
            raise ValueError(f"{self.game_file}: the opening text has no {TASK_MARK!r}")
        return self.intro[start + len(TASK_MARK) :].strip()

    def _engine_commands(self) -> list[str]:
        return [canonical(c) for c in self._game_state["admissible_commands"]]

    def admissible(self) -> list[str]:
        """The engine's admissible commands now, sorted, without ``help``."""
        return sorted(c for c in self._engine_commands() if c != HELP)

    def step(self, action: str) -> tuple[str, bool]:
        """Run one command (canonical: lower case, single spaces)."""
        valid = action in self._engine_commands()
        self._game_state, _, _ = self._engine.step(action)
        self.state = Counts(self.state.steps + 1, self.state.invalid + (not valid))
        return self._game_state.feedback, valid

    def won(self) -> bool:
        return bool(self._game_state["won"])


def replay(game_file: str | os.PathLike[str], actions: list[str]) -> AlfworldWorld:
    """The world after `actions` from the game's start (as 09-tempo restores a state)."""
    world = AlfworldWorld(game_file)
    for action in actions:
        world.step(action)
    return world


def prompt_text(world: AlfworldWorld, show_admissible: bool = False) -> str:
    """The episode's prompt: ALFWorld's opening text and ``>`` (after the admissible
    commands, when shown), as the household world's full text."""
    return observation_text(world.intro, False, world.admissible() if show_admissible else None)


class AlfworldEnvironment(Environment):
    """One ALFWorld game per episode, named by the row's answer (its game id); each
    newline-ended turn is a command; done when won or after `max_steps` commands.

        environment: rlvr.envs.alfworld:AlfworldEnvironment
        environment_options: {data_root: /data/alfworld, max_steps: 50}
    """

    stop = ("\n",)

    def __init__(
        self, data_root: str | None = None, max_steps: int = 50, show_admissible: bool = False
    ) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        if not isinstance(show_admissible, bool):
            raise ValueError(f"show_admissible must be true or false, got {show_admissible!r}")
        self.root, self.max_steps, self.show_admissible = data_root, max_steps, show_admissible

    def reset(self, problem: Any) -> None:
        self.problem = problem
        self.world = AlfworldWorld(game_path(self.root, problem.answer))

    def step(self, turn: str) -> Reply:
        action = canonical(turn)
        observation, valid = self.world.step(action)
        won = self.world.won()
        done = won or self.world.state.steps >= self.max_steps
        shown = self.world.admissible() if self.show_admissible else None
        text = observation_text(observation, done, shown)
        # A turn cut by its token budget hears no newline: add it (`replay_text` reads it).
        text = text if turn.endswith("\n") else "\n" + text
        reward = float(won) - (0.0 if valid else INVALID_PENALTY)
        return Reply(
            text, done, tool_call=valid, invalid_call=not valid, reward=reward, call=action
        )


def replay_text(
    game_file: str | os.PathLike[str], completion: str, max_steps: int | None = None
) -> Outcome:
    """Play an episode's text (turns and observations) again from the game's start, as the
    household world's `replay_text` does: a turn counts when its observation follows it."""
    return replay_world(AlfworldWorld(game_file), completion, max_steps)


def won_minus_invalid(
    prompts: list[str],
    completions: list[str],
    reference: list[str],
    game_file: list[str | None] | None = None,
    **_: Any,
) -> list[float]:
    """08-alfworld's reward, ``won − 0.1·invalid_actions``, replayed from each trajectory's
    text; the game is the row's ``game_file`` column (the alfworld task's problems carry
    it), else the reference, the game id (relative ids are read under ``$ALFWORLD_DATA``)."""
    files = game_file or [None] * len(reference)
    return [
        replay_text(file or game_path(None, ref), text).reward
        for text, ref, file in zip(completions, reference, files, strict=True)
    ]


def game_rows(
    root: str | os.PathLike[str] | None,
    split: str,
    task_types: list[str] | None = None,
    show_admissible: bool = False,
) -> list[dict[str, str]]:
    """One dataset row per game of the split: ``prompt`` (`prompt_text`), ``answer`` (the
    game id, which `AlfworldEnvironment` plays) and ``task_type`` (for a teacher's skill)."""
    rows = []
    for game in find_games(root, split, task_types):
        prompt = prompt_text(AlfworldWorld(game.game_file), show_admissible)
        rows.append({"prompt": prompt, "answer": game.game_id, "task_type": game.task_type})
    return rows
