"""What an items record holds: maj@k voted by the task's equivalence of answers (not by
their text), and the data's own id as the item's uid."""

from __future__ import annotations

import pytest
import torch
from hf_testlib import write_jsonl

from rlvr.eval.bench import KSettings, item_uids, score_items
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


def _records(tmp_path, rows: list[dict]) -> list[dict]:
    data = write_jsonl(tmp_path / "ids.jsonl", rows)
    task = make_task("dataset", data=data, verifier="math", eval_only=True)
    return score_items(FixedEngine(["\\boxed{4}"]), task, task.problems("eval"), KSettings(k=1))


def test_items_are_named_by_the_data_id(tmp_path):
    rows = [
        {"unique_id": "test/algebra/17.json", "prompt": "2+2?", "answer": "4"},
        {"unique_id": "test/algebra/3.json", "prompt": "1+3?", "answer": "4"},
    ]
    records = _records(tmp_path, rows)
    assert [r["uid"] for r in records] == ["test/algebra/17.json", "test/algebra/3.json"]
    # `id` comes before `unique_id`; numbers become text (uids are strings in items files)
    rows = [{**r, "id": 100 + i} for i, r in enumerate(rows)]
    assert [r["uid"] for r in _records(tmp_path, rows)] == ["100", "101"]


def test_positions_name_items_without_a_usable_id(tmp_path):
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": "1+3?", "answer": "4"}]
    assert [r["uid"] for r in _records(tmp_path, rows)] == ["dataset/eval/0", "dataset/eval/1"]
    repeated = [{**r, "id": "q1"} for r in rows]  # two rows named q1 cannot be paired
    with pytest.warns(UserWarning, match="named by position, not by the data's 'id' column"):
        uids = [r["uid"] for r in _records(tmp_path, repeated)]
    assert uids == ["dataset/eval/0", "dataset/eval/1"]
    # synthetic tasks have no rows: their uids are the task's
    problems = make_task("arithmetic").problems("eval")[:2]
    assert item_uids(problems) == ["arithmetic/eval/0", "arithmetic/eval/1"]
