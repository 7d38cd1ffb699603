"""A dataset task names a missing column once, with the columns there are, and a split
that the data cannot hold says which sizes to lower."""

from __future__ import annotations

import json

import pytest

from rlvr.tasks import make_task


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def rows(n):
    return [{"problem": f"{i}+{i}?", "solution": f"#### {2 * i}", "id": i} for i in range(n)]


def test_a_missing_prompt_column_is_named_once_with_the_columns(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", rows(50))
    with pytest.raises(ValueError) as err:
        make_task("gsm8k", data=path, dev_size=0).problems("train")
    message = str(err.value)
    assert message == (
        f"{path}: no column 'question' (prompt_field); available columns: problem, "
        "solution, id; set task_options.prompt_field"
    )


def test_a_missing_answer_column_is_named_once(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", rows(50))
    task = make_task("gsm8k", data=path, prompt_field="problem", dev_size=0)
    with pytest.raises(ValueError, match=r"no column 'answer' \(answer_field\); available"):
        task.problems("train")
    task = make_task(
        "gsm8k", data=path, prompt_field="problem", answer_field="solution", dev_size=0
    )
    assert len(task.problems("train")) == 50


def test_a_missing_eval_column_names_the_eval_option(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(10))
    evals = write_jsonl(tmp_path / "eval.jsonl", [{"q": "1+1?", "a": "2"}])
    task = make_task(
        "dataset", data=train, eval_data=evals, prompt_field="problem", answer_field="solution"
    )
    with pytest.raises(ValueError, match=r"no column 'problem' \(eval_prompt_field\).*: q, a;"):
        task.problems("eval")


def test_a_column_missing_from_some_rows_is_still_reported_by_line(tmp_path):
    data = rows(3)
    del data[1]["problem"]
    path = write_jsonl(tmp_path / "data.jsonl", data)
    task = make_task("dataset", data=path, prompt_field="problem", answer_field="solution")
    with pytest.raises(ValueError, match="line 2: no text in prompt column 'problem'"):
        task.problems("train")
