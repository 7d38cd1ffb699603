"""Arithmetic task: the template, the operand ranges and hand-worked verdicts."""

import pytest

from rlvr.tasks import ArithmeticTask, Problem
from rlvr.verify import Verdict

PROBLEM = Problem("arithmetic/train/0", "Q: 37+85=? A:", "122", " \\boxed{122}")
NEGATIVE = Problem("arithmetic/train/1", "Q: 23-35=? A:", "-12", " \\boxed{-12}")


def test_prompt_and_target_template():
    task = ArithmeticTask(digits=2, ops="+-*", train_size=300, dev_size=0, eval_size=0)
    for problem in task.problems("train"):
        a_op_b = problem.prompt.removeprefix("Q: ").removesuffix("=? A:")
        op = next(c for c in a_op_b[1:] if c in "+-*")
        a, b = a_op_b.split(op)
        assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert problem.answer == str(value)
        assert problem.target == f" \\boxed{{{value}}}"
    assert any(p.answer.startswith("-") for p in task.problems("train"))


def test_one_digit_includes_zero():
    task = ArithmeticTask(digits=1, train_size=50, dev_size=0, eval_size=0)
    operands = {int(x) for p in task.problems("train") for x in p.prompt[3:-5].split("+")}
    assert min(operands) == 0 and max(operands) == 9


def test_tagged_target():
    task = ArithmeticTask(answer_format="tagged", train_size=1, dev_size=0, eval_size=0)
    problem = task.problems("train")[0]
    assert problem.target == f" <answer>{problem.answer}</answer>"


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        (" \\boxed{122}", Verdict(True, True, "122", "correct")),
        (" \\boxed{ 122 }", Verdict(True, True, "122", "correct")),
        (
            " \\boxed{122}Q: 1+1=? A:",
            Verdict(True, True, "122", "correct"),
        ),  # trailing junk ignored
        (" \\boxed{121} \\boxed{122}", Verdict(True, True, "122", "correct")),  # last box counts
        (" \\boxed{121}", Verdict(False, True, "121", "expected 122, got 121")),
        (" \\boxed{0122}", Verdict(True, True, "0122", "correct")),
        (" \\boxed{12 2}", Verdict(False, False, "12 2", "answer is not an integer literal")),
        (" \\boxed{120+2}", Verdict(False, False, "120+2", "answer is not an integer literal")),
        (" 122", Verdict(False, False, None, "no \\boxed{...} answer found")),
        (" <answer>122</answer>", Verdict(False, False, None, "no \\boxed{...} answer found")),
        (" \\boxed{122", Verdict(False, False, None, "no \\boxed{...} answer found")),
    ],
)
def test_boxed_verdicts(completion, verdict):
    task = ArithmeticTask()
    assert task.verify(PROBLEM, completion) == verdict


def test_negative_answer():
    task = ArithmeticTask(ops="-")
    assert task.verify(NEGATIVE, " \\boxed{-12}").correct
    assert not task.verify(NEGATIVE, " \\boxed{12}").correct


def test_tagged_verdicts():
    task = ArithmeticTask(answer_format="tagged")
    assert task.verify(PROBLEM, " <answer>122</answer>") == Verdict(True, True, "122", "correct")
    unformatted = task.verify(PROBLEM, " \\boxed{122}")
    assert (unformatted.correct, unformatted.formatted) == (False, False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"digits": 0}, "digits must be an integer from 1 to 18, got 0"),
        ({"digits": "2"}, "digits must be an integer"),
        ({"ops": "/"}, "ops must be a non-empty subset of '\\+-\\*', got '/'"),
        ({"ops": ""}, "ops must be a non-empty subset"),
        ({"answer_format": "json"}, "answer_format must be one of boxed, tagged, got 'json'"),
        ({"seed": 1.5}, "seed must be an integer"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        ArithmeticTask(**options)


def test_correct_box_after_100k_characters_of_reasoning_is_correct():
    task = ArithmeticTask(train_size=1, dev_size=0, eval_size=0)
    problem = task.problems("train")[0]
    completion = "Let me think. " * 7_143 + f"So the answer is \\boxed{{{problem.answer}}}"
    assert len(completion) > 100_000
    verdict = task.verify(problem, completion)
    assert verdict.correct and verdict.formatted, verdict
