"""maj@k votes by the task's equivalence of answers, not by their text."""

from __future__ import annotations

import pytest
import torch
from hf_testlib import write_jsonl

from rlvr.eval.bench import KSettings, score_items
from rlvr.eval.passk import answer_classes, majority_correct
from rlvr.rollout import Generation
from rlvr.tasks import make_task


class FixedEngine:
    """Answers every prompt with the same completions, in order."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def generate(self, prompts, params, generator) -> Generation:
        rows = len(prompts) * len(self.texts)
        zeros = torch.zeros(rows, 1)
        return Generation(
            prompt_ids=[[0]] * rows,
            response_ids=torch.zeros(rows, 1, dtype=torch.long),
            response_mask=zeros,
            sampler_logprobs=zeros,
            truncated=torch.zeros(rows, dtype=torch.bool),
            prompt_index=torch.arange(len(prompts)).repeat_interleave(len(self.texts)),
            texts=self.texts * len(prompts),
        )


def _maj(tmp_path, reference: str, boxed: list[str]) -> float:
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "What is it?", "answer": reference}])
    task = make_task("dataset", data=data, verifier="math", eval_only=True)
    engine = FixedEngine([f"So \\boxed{{{b}}}." for b in boxed])
    [record] = score_items(engine, task, task.problems("eval"), KSettings(k=len(boxed)))
    return record["maj"]


def test_equivalent_answers_pool_their_votes(tmp_path):
    # Reference 1/2; samples 3, 1/2, 0.5. By text each answer has one vote and the tie
    # goes to "3" (first seen, wrong): maj 0. By the math verifier 1/2 = 0.5: that class
    # has 2 votes against 1, and it is correct: maj 1.
    assert _maj(tmp_path, "1/2", ["3", "1/2", "0.5"]) == 1.0
    # Reference 3; samples 3, \frac{1}{2}, 0.5. By text "3" wins the tie (maj 1), but the
    # model's majority answer is one half (2 votes, wrong): maj 0.
    assert _maj(tmp_path, "3", ["3", "\\frac{1}{2}", "0.5"]) == 0.0


def test_answer_classes_by_hand():
    # 0.5 and 1/2 are one answer; "1 / 2" equals "1/2" by text (whitespace removed), so the
    # equivalence is asked only about the first sample of each new text.
    asked = []

    def half(i, j):
        asked.append((i, j))
        return {texts[i], texts[j]} <= {"0.5", "1/2"}

    texts = ["7", "0.5", None, "1/2", "1 / 2", "7"]
    assert answer_classes(texts, half) == [0, 1, None, 1, 1, 0]
    assert asked == [(1, 0), (3, 0), (3, 1)]
    # Votes: class 0 (7) 2, class 1 (one half) 3 → one half wins; its three samples are
    # judged correct: maj 1. By text: 7 has 2, 1/2 has 2, 0.5 has 1; the tie goes to 7
    # (seen first), wrong: maj 0.
    correct = [False, True, False, True, True, False]
    assert majority_correct(texts, correct, half) == 1.0
    assert majority_correct(texts, correct) == 0.0


@pytest.mark.parametrize("equivalent", [None, lambda i, j: False])
def test_without_equivalences_votes_are_by_text(equivalent):
    assert majority_correct(["12", "12", "13", None], [True, True, False, False], equivalent) == 1.0
    assert majority_correct(["13", "12", "13", "12"], [False, True, False, True], equivalent) == 0.0
