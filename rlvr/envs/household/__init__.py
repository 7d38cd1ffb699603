"""An embedded household world in ALFWorld's command language (docs/household.md): rooms
drawn from a seed, six task types, admissible commands, an expert walkthrough per game,
replay of any prefix, and the environment rlvr's episodes play."""

from rlvr.envs.household.catalog import TASK_TYPES
from rlvr.envs.household.environment import (
    INVALID_PENALTY,
    HouseholdEnvironment,
    Outcome,
    canonical,
    compact_observation,
    compact_prompt,
    prompt_text,
    replay_text,
)
from rlvr.envs.household.games import game_from_id, intro, make_game, walkthrough
from rlvr.envs.household.world import Game, Goal, State, World, replay

__all__ = [
    "INVALID_PENALTY",
    "TASK_TYPES",
    "Game",
    "Goal",
    "HouseholdEnvironment",
    "Outcome",
    "State",
    "World",
    "canonical",
    "compact_observation",
    "compact_prompt",
    "game_from_id",
    "intro",
    "make_game",
    "prompt_text",
    "replay",
    "replay_text",
    "walkthrough",
]
