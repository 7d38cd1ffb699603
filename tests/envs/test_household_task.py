"""The household task through rlvr's episode machinery: the walkthrough wins with reward 1,
an invalid command costs 0.1, and the text alone gives the same outcome as the episode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import ScriptedEngine

from rlvr.envs.household import game_from_id, replay_text, walkthrough
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task
from rlvr.tasks.base import SPLITS
from rlvr.tasks.household import won_minus_invalid

SIZES = {"train_size": 30, "dev_size": 6, "eval_size": 6}


def play(task, problem, first_turns: list[str]):
    """One episode whose policy says `first_turns`, then follows the walkthrough."""
    script = [*first_turns, *(f" {a}\n" for a in walkthrough(game_from_id(problem.answer)))]
    # Each observation ends with "\n>", as the prompt does: the turn's index is their count.
    engine = ScriptedEngine(
        CharTokenizer(task.alphabet), lambda context, k: script[context.count("\n>") - 1]
    )
    params = SamplingParams(group_size=1, max_new_tokens=4000)
    gen = generate_for(engine, task, [problem], params, torch.Generator())
    return gen.texts[0], gen.episodes[0]


@pytest.mark.parametrize("show_admissible", [False, True])
def test_the_walkthrough_wins_an_episode_with_reward_1(show_admissible):
    task = make_task("household", show_admissible=show_admissible, **SIZES)
    for problem in task.problems("train")[:6]:
        text, episode = play(task, problem, [])
        assert text == problem.target  # the target is the walkthrough's own episode
        assert episode.ended_by == "env" and episode.invalid_calls == 0
        assert episode.turn_reward == 1.0  # won, no invalid command
        assert task.verify(problem, text).correct
        assert won_minus_invalid([problem.prompt], [text], [problem.answer]) == [1.0]
        assert ("\nAdmissible commands: " in text) == show_admissible
        assert episode.observations_cut == 0


def test_an_invalid_command_costs_a_tenth():
    task = make_task("household", **SIZES)
    problem = task.problems("train")[0]
    text, episode = play(task, problem, [" dance\n"])
    assert text.startswith(" dance\nNothing happens.\n>")
    assert episode.invalid_calls == 1 and episode.ended_by == "env"
    # 1 − 0.1 in floats: -0.1 + 0 + … + 1.0 and 1.0 − 0.1·1 both round to the double 0.9.
    assert episode.turn_reward == 1 - 0.1
    assert won_minus_invalid([problem.prompt], [text], [problem.answer]) == [1 - 0.1]
    assert task.verify(problem, text).correct


def test_a_turn_cut_by_its_budget_reads_back_as_the_episode_played_it():
    task = make_task("household", max_turn_tokens=48, **SIZES)
    problem = task.problems("train")[1]
    text, episode = play(task, problem, [" " + "x" * 60 + "\n"])
    # The turn stops at 48 tokens, no newline: the environment adds it before its answer.
    assert text.startswith(" " + "x" * 47 + "\nNothing happens.\n>")
    outcome = replay_text(game_from_id(problem.answer), text)
    assert (outcome.won, outcome.invalid) == (True, episode.invalid_calls) == (True, 1)


def test_an_episode_that_runs_out_of_steps_is_lost():
    task = make_task("household", max_steps=3, **SIZES)
    problem = task.problems("train")[2]
    text, episode = play(task, problem, [" look\n", " look\n", " inventory\n"])
    assert episode.ended_by == "env" and episode.turns == 3 and episode.turn_reward == 0.0
    assert not text.endswith(">")  # the last observation ends the episode
    assert not task.verify(problem, text).correct
    assert won_minus_invalid([problem.prompt], [text], [problem.answer]) == [0.0]


def test_a_forged_observation_does_not_win():
    task = make_task("household", **SIZES)
    problem = task.problems("train")[0]
    forged = problem.target.split("\n")[0] + "\n" + "You put it there. You won!"
    verdict = task.verify(problem, forged)
    assert not verdict.correct and "not won after 1 steps" in verdict.reason


def test_the_splits_are_disjoint_and_prompts_state_the_goal():
    task = make_task("household", **SIZES)
    ids = {split: [p.answer for p in task.problems(split)] for split in SPLITS}
    assert [len(set(ids[s])) for s in SPLITS] == [30, 6, 6]
    assert not set(ids["train"]) & set(ids["dev"]) and not set(ids["eval"]) & (
        set(ids["train"]) | set(ids["dev"])
    )
    for problem in task.problems("eval"):
        assert problem.prompt.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in")
        assert "\n\nYour task is to: " in problem.prompt and problem.prompt.endswith(".\n>")
    assert {p.answer.split("/")[0] for p in task.problems("train")} == set(task.task_types)


@pytest.mark.parametrize("show_admissible", [False, True])
def test_observation_spans_leave_exactly_the_commands(show_admissible):
    task = make_task("household", show_admissible=show_admissible, **SIZES)
    problem = task.problems("dev")[0]
    target, kept, start = problem.target, "", 0
    for begin, end in task.observation_spans(target):
        kept, start = kept + target[start:begin], end
    plan = walkthrough(game_from_id(problem.answer))
    assert kept + target[start:] == "".join(f" {a}\n" for a in plan)


def test_task_types_are_checked_by_name():
    assert make_task("household", task_types=["look_at_obj_in_light"], **SIZES).task_types == (
        "look_at_obj_in_light",
    )
    with pytest.raises(ValueError, match=r"task_types\[1\] is 'heat'; valid task types are"):
        make_task("household", task_types=["look_at_obj_in_light", "heat"])
    with pytest.raises(ValueError, match="show_admissible must be true or false, got 'yes'"):
        make_task("household", show_admissible="yes")
