"""The household task's compact text (docs/household.md, "The embedded policy"): terse
observations and a prompt that says where the goal's objects start, so that an episode
fits the embedded model's context; its walkthrough wins through rlvr's episodes, the text
alone replays to the same outcome, and the warm start takes the task's longer context."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import ScriptedEngine

from rlvr.envs.household import (
    compact_observation,
    compact_prompt,
    game_from_id,
    make_game,
    replay_text,
    walkthrough,
)
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task
from rlvr.tasks.household import COMPACT_POSITIONS, walkthrough_text, won_minus_invalid

SIZES = {"train_size": 30, "dev_size": 6, "eval_size": 6}


@pytest.mark.parametrize(
    ("full", "compact"),
    [
        ("You arrive at fridge 1. The fridge 1 is closed.", "closed."),
        (
            "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, and a lettuce 1.",
            "egg 1, lettuce 1.",
        ),
        ("You arrive at sofa 1. On the sofa 1, you see nothing.", "nothing."),
        ("You arrive at desk 1. On the desk 1, you see a pen 1.", "pen 1."),
        ("You heat the egg 1 using the microwave 1.", "ok."),
        ("You put the mug 1 in/on the cabinet 2.", "ok."),
        ("Nothing happens.", "Nothing happens."),
        ("You are carrying: a mug 1.", "You are carrying: a mug 1."),
        ("This is a hot mug 1.", "This is a hot mug 1."),
    ],
)
def test_compact_observations(full, compact):
    assert compact_observation(full) == compact


def test_the_compact_episode_of_a_worked_game():
    # docs/household.md's game: the mug starts in the closed microwave 1, the goal wants
    # it hot in a garbagecan (garbagecan 1 holds apple 1).
    game = make_game(3, "pick_heat_then_place_in_recep")
    assert compact_prompt(game) == "kitchen: put a hot mug in garbagecan. mug 1 in microwave 1.\n>"
    assert walkthrough_text(game, compact=True) == (
        " go to microwave 1\nclosed.\n> open microwave 1\nmug 1, fork 1.\n"
        "> take mug 1 from microwave 1\nok.\n> heat mug 1 with microwave 1\nok.\n"
        "> go to garbagecan 1\napple 1.\n> put mug 1 in/on garbagecan 1\nok."
    )
    # look-at-in-light: the room holds box 1, 2 and 3; the prompt names the one the
    # walkthrough takes (the first in receptacle order) and the lamp.
    game = make_game(0, "look_at_obj_in_light")
    assert compact_prompt(game) == (
        "livingroom: look at box under the floorlamp. box 1 in armchair 2, "
        "floorlamp 1 in sidetable 2.\n>"
    )
    assert walkthrough(game)[:2] == ["go to armchair 2", "take box 1 from armchair 2"]


def test_the_compact_walkthrough_wins_an_episode_and_replays_from_its_text():
    task = make_task("household", text="compact", **SIZES)
    for problem in task.problems("train")[:6]:
        script = [f" {a}\n" for a in walkthrough(game_from_id(problem.answer))]
        engine = ScriptedEngine(
            CharTokenizer(task.alphabet),
            lambda context, k, script=script: script[context.count("\n>") - 1],
        )
        params = SamplingParams(group_size=1, max_new_tokens=COMPACT_POSITIONS)
        gen = generate_for(engine, task, [problem], params, torch.Generator())
        text, episode = gen.texts[0], gen.episodes[0]
        assert text == problem.target
        assert episode.ended_by == "env" and episode.turn_reward == 1.0
        assert task.verify(problem, text).correct
        assert won_minus_invalid([problem.prompt], [text], [problem.answer]) == [1.0]


def test_an_invalid_command_in_compact_text_costs_a_tenth():
    task = make_task("household", text="compact", **SIZES)
    problem = task.problems("train")[0]
    game = game_from_id(problem.answer)
    text = " dance\nNothing happens.\n>" + problem.target
    outcome = replay_text(game, text)
    assert (outcome.won, outcome.invalid) == (True, 1)
    # 1 − 0.1: both sides round to the same double (as in test_household_task).
    assert won_minus_invalid([problem.prompt], [text], [problem.answer]) == [1 - 0.1]
    # The last command, cut before its newline, was never answered: not won.
    cut = problem.target[: problem.target.rindex("\n")]
    assert not replay_text(game, cut).won


def test_every_compact_episode_of_the_default_splits_fits_the_embedded_context():
    task = make_task("household", text="compact")
    assert task.embedded_model["max_positions"] == COMPACT_POSITIONS
    longest = max(
        len(p.prompt) + len(p.target) + 1  # + EOS
        for split in ("train", "dev", "eval")
        for p in task.problems(split)
    )
    assert longest <= COMPACT_POSITIONS
    # RL's default budget (the longest target, EOS and slack) after the longest prompt too.
    prompt = max(len(p.prompt) for s in ("train", "dev", "eval") for p in task.problems(s))
    assert prompt + task.default_max_new_tokens <= COMPACT_POSITIONS


def test_an_unknown_text_mode_is_named():
    with pytest.raises(ValueError, match="text is 'short'; valid text modes are full, compact"):
        make_task("household", text="short", **SIZES)
