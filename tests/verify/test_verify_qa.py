"""Exact match of short answers (the Search-R1 configs' verifier): SQuAD normalisation,
aliases, both answer formats, and a dataset whose answer column is a list."""

from __future__ import annotations

import json

from rlvr.tasks import make_task
from rlvr.verify import check
from rlvr.verify.qa import check_exact_match, normalise


def test_answers_match_after_squad_normalisation():
    assert normalise("The  Eiffel-Tower!") == "eiffeltower"  # case, article, punctuation
    assert check_exact_match("I searched.\nAnswer: the Paris", "Paris").correct
    assert check_exact_match("<answer>Paris.</answer> then <answer>paris</answer>", "Paris").correct
    wrong = check_exact_match("Answer: Lyon", "['Paris', 'City of Light']")
    assert (wrong.correct, wrong.formatted, wrong.extracted) == (False, True, "Lyon")
    assert check_exact_match("Answer: city of light", '["Paris", "City of Light"]').correct
    assert not check_exact_match("Paris", "Paris").formatted  # no answer line: unformatted
    assert check("exact_match", "Answer: Paris", "Paris").correct  # registered by name


def test_a_dataset_with_lists_of_golden_answers(tmp_path):
    rows = [{"question": f"Q{i}?", "golden_answers": [f"a{i}", f"alias {i}"]} for i in range(6)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = make_task(
        "dataset",
        data=str(data),
        prompt_field="question",
        answer_field="golden_answers",
        verifier="exact_match",
        dev_size=1,
    )
    problem = next(p for p in task.problems("train") if p.prompt == "Q3?")
    assert task.verify(problem, "Answer: Alias 3").correct
    assert not task.verify(problem, "Answer: a4").correct
