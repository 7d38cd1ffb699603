"""Verdict table of the `last_number` verifier: the last number anywhere in the completion
(lm-evaluation-harness's GSM8K "flexible-extract"), for models that answer in their own
words. (correct, formatted) is the expected pair; formatted means a number was found."""

from __future__ import annotations

import pytest

from rlvr.tasks import make_task
from rlvr.verify import check

TABLE = [
    # (completion, reference, correct, formatted)
    ("2 + 9 = 11", "11", True, True),
    ("2 + 9 = 11.", "11", True, True),  # a full stop is not a decimal point
    ("The answer is 7.\n\nThis is a classic example", "7", True, True),
    ("1 + 4 = 5 in a decimal form.", "5", True, True),
    ("11", "11", True, True),
    ("\\boxed{11}", "11", True, True),
    ("It is 5.0", "5", True, True),  # compared as numbers
    ("1,000 apples", "1000", True, True),  # thousands separators
    ("1 - 4 = -3", "-3", True, True),
    ("The sum of 0 + 4 is 0 in", "4", False, True),  # the last number counts, not the first
    ("13 is larger than 70.", "70", True, True),  # why the example's task is addition only
    ("The answer is 2 + 9", "11", False, True),
    ("3, 4", "34", False, True),  # a list is not a thousands group: 4
    ("eleven", "11", False, False),
    ("", "11", False, False),
    ("To solve this problem, we need to find the sum of 2 and", "11", False, True),
]


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), TABLE)
def test_last_number_table(completion, reference, correct, formatted):
    verdict = check("last_number", completion, reference)
    assert (verdict.correct, verdict.formatted) == (correct, formatted), verdict.reason


def test_last_number_names_what_it_read():
    verdict = check("last_number", "2 + 9 = 12.", "11")
    assert verdict.extracted == "12"
    assert verdict.reason == "expected 11, got 12"


def test_dataset_task_takes_last_number(tmp_path):
    data = tmp_path / "add.jsonl"
    data.write_text('{"prompt": "What is 2 + 9?", "answer": "11"}\n' * 3)
    task = make_task("dataset", data=data, verifier="last_number", eval_only=True)
    (problem,) = task.problems("eval")[:1]
    assert problem.answer == "11"
    assert task.verify(problem, "2 + 9 = 11.").correct
