"""Worked multi-step arithmetic: hand-worked steps, the warm-start mix, mirrors, budget."""

import pytest

from rlvr.tasks import make_task
from rlvr.tasks.worked import WorkedArithmeticTask, content_key, parse_prompt, worked_steps


def test_steps_by_hand():
    # 3+4*2-5: the product first (4*2=8), then 3+8=11, then 11-5=6.
    steps, value = worked_steps([3, 4, 2, 5], ["+", "*", "-"])
    assert [s.text() for s in steps] == ["4*2=8", "3+8=11", "11-5=6"]
    assert value == 6
    # 2*3*4-9: 2*3=6, 6*4=24, 24-9=15.
    steps, value = worked_steps([2, 3, 4, 9], ["*", "*", "-"])
    assert [s.text() for s in steps] == ["2*3=6", "6*4=24", "24-9=15"]
    assert value == 15


def test_a_slip_is_carried_to_the_answer():
    # Step 0 (4*2) slips by +1: 4*2=9, 3+9=12, 12-5=7.
    steps, value = worked_steps([3, 4, 2, 5], ["+", "*", "-"], slip=(0, 1))
    assert [s.text() for s in steps] == ["4*2=9", "3+9=12", "12-5=7"]
    assert value == 7


def test_mirrors_share_a_key_and_different_problems_do_not():
    key = content_key([3, 4, 2, 5], ["+", "*", "-"])
    assert content_key([2, 4, 3, 5], ["*", "+", "-"]) == key  # 2*4+3-5
    assert content_key([3, 5, 4, 2], ["-", "+", "*"]) == key  # 3-5+4*2
    assert content_key([3, 4, 2, 5], ["-", "*", "+"]) != key  # 3-4*2+5


def test_parse_prompt_round_trips():
    assert parse_prompt("Q: 3+4*2-5=? A:") == ([3, 4, 2, 5], ["+", "*", "-"])
    with pytest.raises(ValueError, match="not a worked-arithmetic prompt"):
        parse_prompt("Q: 3 4 -> 7 A:")


def test_target_mix_matches_the_fractions():
    task = WorkedArithmeticTask(
        short_frac=0.3, wrong_frac=0.2, train_size=2000, dev_size=0, eval_size=0
    )
    problems = task.problems("train")
    short = sum(p.target.startswith(" \\boxed") for p in problems) / len(problems)
    wrong = sum(not task.verify(p, p.target).correct for p in problems) / len(problems)
    assert abs(short - 0.3) < 0.04 and abs(wrong - 0.2) < 0.04
    # Long targets are longer than short ones: the length can move either way.
    lengths = sorted(len(p.target) for p in problems)
    assert lengths[0] <= 12 and lengths[-1] >= 30


def test_every_target_is_formatted_and_the_answer_is_the_true_value():
    task = WorkedArithmeticTask(train_size=300, dev_size=0, eval_size=0)
    for problem in task.problems("train"):
        numbers, ops = parse_prompt(problem.prompt)
        assert problem.answer == str(worked_steps(numbers, ops)[1])
        assert task.verify(problem, problem.target).formatted
        assert task.verify(problem, f" \\boxed{{{problem.answer}}}").correct


def test_default_budget_is_the_longest_target_plus_eos_and_slack():
    task = make_task("worked")
    longest = max(len(p.target) for s in ("train", "dev", "eval") for p in task.problems(s))
    assert task.longest_target_chars == longest
    assert task.default_max_new_tokens == longest + 5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_terms": 1}, "min_terms must be an integer from 2 to 6, got 1"),
        ({"min_terms": 4, "max_terms": 3}, "min_terms=4 must be ≤ max_terms=3"),
        ({"short_frac": 0.7, "wrong_frac": 0.5}, "short_frac \\+ wrong_frac must be ≤ 1"),
        ({"wrong_frac": -0.1}, "wrong_frac must be a number in \\[0, 1\\], got -0.1"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        WorkedArithmeticTask(**options)
