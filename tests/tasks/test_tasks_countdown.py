"""Countdown task: solvable problems, hand-worked verdicts."""

from collections import Counter

import pytest

from rlvr.tasks import CountdownTask, Problem
from rlvr.tasks.countdown import parse_prompt
from rlvr.verify import evaluate

PROBLEM = Problem("countdown/train/0", "Q: 3 7 25 -> 46 A:", "46", " \\boxed{25+3*7}")


def test_targets_use_every_number_once_and_stay_in_range():
    task = CountdownTask(
        num_count=4, max_number=20, max_target=150, train_size=300, dev_size=0, eval_size=0
    )
    for problem in task.problems("train"):
        numbers, target = parse_prompt(problem.prompt)
        assert numbers == sorted(numbers) and len(numbers) == 4
        assert all(1 <= n <= 20 for n in numbers)
        assert 1 <= target <= 150 and problem.answer == str(target)
        expression = problem.target.removeprefix(" \\boxed{").removesuffix("}")
        value, literals = evaluate(expression, integral=True)
        assert value == target
        assert Counter(literals) == Counter(numbers)


def test_all_operators_appear():
    task = CountdownTask(train_size=500, dev_size=0, eval_size=0)
    used = set("".join(p.target for p in task.problems("train")))
    assert set("+-*/()") <= used


def test_parse_prompt():
    assert parse_prompt("Q: 3 7 25 -> 46 A:") == ([3, 7, 25], 46)
    with pytest.raises(ValueError, match="not a countdown prompt"):
        parse_prompt("Q: 3 7 -> A:")


@pytest.mark.parametrize(
    ("completion", "correct", "formatted", "reason"),
    [
        (" \\boxed{25+3*7}", True, True, "correct"),  # 25 + 21 = 46
        (" \\boxed{7*3+25}", True, True, "correct"),  # any order
        (" \\boxed{(25-7)*3-8}", False, True, "uses numbers not available: 8"),
        (" \\boxed{25+25-7+3}", False, True, "uses numbers not available: 25"),  # 25 twice
        (" \\boxed{25+3+7}", False, True, "expected 46, got 35"),
        (" \\boxed{25*3/7}", False, True, "expected 46, got 75/7"),  # exact, not an integer
        (" \\boxed{46}", False, True, "uses numbers not available: 46"),
        (" \\boxed{25+3**7}", False, False, "unparsable expression: unexpected '*'"),
        (" \\boxed{7/(3-3)}", False, False, "unparsable expression: division by zero"),
        (" 25+3*7", False, False, "no \\boxed{...} answer found"),
    ],
)
def test_verdicts(completion, correct, formatted, reason):
    verdict = CountdownTask().verify(PROBLEM, completion)
    assert (verdict.correct, verdict.formatted) == (correct, formatted)
    assert verdict.reason.startswith(reason), verdict.reason


def test_not_every_number_must_be_used():
    problem = Problem("countdown/train/1", "Q: 2 5 9 -> 10 A:", "10", " \\boxed{2*9-...}")
    assert CountdownTask().verify(problem, "\\boxed{2*5}").correct


def test_repeated_numbers_may_each_be_used_once():
    problem = Problem("countdown/train/2", "Q: 4 4 9 -> 17 A:", "17", "")
    task = CountdownTask()
    assert task.verify(problem, "\\boxed{4+4+9}").correct
    assert not task.verify(problem, "\\boxed{4+4+4+9-4}").correct


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_count": 1}, "num_count must be an integer from 2 to 6, got 1"),
        ({"max_number": 0}, "max_number must be an integer from 1"),
        ({"max_target": -5}, "max_target must be an integer from 1"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        CountdownTask(**options)
