"""RetryWithFeedback: a wrong boxed answer hears " wrong:" and the policy answers again, up
to max_tries; the verifier scores the last answer; fewer_tries prices the retries."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import ScriptedEngine

from rlvr.envs.attach import attach_environment
from rlvr.envs.feedback import RetryWithFeedback, fewer_tries
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task


def _task(max_tries=3):
    task = make_task("arithmetic", digits=2, ops="+")
    options = {"max_tries": max_tries}
    attach_environment(task, "rlvr.envs.feedback:RetryWithFeedback", options, [], {"max_turns": 4})
    return task


def _guesses(*answers):
    """Answers in order: the k-th turn of an episode writes answers[k]."""

    def reply(context, k):
        turn = context.split("A:", 1)[1].count("wrong:")
        return f" \\boxed{{{answers[turn]}}}ramble"

    return reply


def _play(task, problem, reply, group_size=1):
    engine = ScriptedEngine(CharTokenizer(), reply)
    params = SamplingParams(group_size=group_size, max_new_tokens=60)
    return generate_for(engine, task, [problem], params, torch.Generator())


def test_a_wrong_answer_hears_feedback_and_a_later_right_one_counts():
    task = _task()
    problem = next(p for p in task.problems("train") if p.answer != "0")
    gen = _play(task, problem, _guesses("0", problem.answer))
    # Turn 1 is cut at its "}" ("ramble" dropped), hears " wrong:", turn 2 is right.
    assert gen.texts == [f" \\boxed{{0}} wrong: \\boxed{{{problem.answer}}}"]
    record = gen.episodes[0]
    assert (record.turns, record.tool_calls, record.ended_by) == (2, 2, "env")
    assert task.verify(problem, gen.texts[0]).correct
    assert fewer_tries([""], gen.texts, [True]) == [0.75]  # one retry: 1 − 1/4


def test_tries_run_out_and_a_first_right_answer_ends_at_once():
    task = _task(max_tries=2)
    problem = next(p for p in task.problems("train") if p.answer not in ("0", "1"))
    gen = _play(task, problem, _guesses("0", "1", problem.answer))
    assert gen.texts == [" \\boxed{0} wrong: \\boxed{1}"]  # the second try is the last
    assert not task.verify(problem, gen.texts[0]).correct
    gen = _play(task, problem, _guesses(problem.answer))
    assert gen.episodes[0].turns == 1 and fewer_tries([""], gen.texts, [True]) == [1.0]
    assert fewer_tries(["", ""], ["x wrong: y", "z"], [False, False]) == [0.0, 0.0]


def test_max_tries_is_checked():
    with pytest.raises(ValueError, match=r"environment_options\.max_tries must be an integer ≥ 1"):
        RetryWithFeedback(max_tries=0)
