"""Split sizes a small dataset cannot hold are refused before the model loads."""

from __future__ import annotations

import pytest
from hf_testlib import gsm8k_rows, write_jsonl

from rlvr.train import loop
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(loop, "load_policy", refuse)


def config(tmp_path, task_options, eval_size=0):
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(20))
    return resolve_config(
        {
            "model": str(tmp_path / "model"),  # never read: the data is checked first
            "task": "gsm8k",
            "task_options": {"data": data, **task_options},
            "eval_size": eval_size,
            "max_new_tokens": 8,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )


def test_default_dev_size_past_a_small_dataset_fails_before_the_model(tmp_path, no_model):
    # gsm8k holds out dev_size=200 by default; the file has 20 prompts
    with pytest.raises(
        ValueError,
        match=r"has 20 distinct valid prompts, too few to hold out dev_size=200 \+ eval_size=0"
        r".*task_options.dev_size and task_options.eval_size to add up to less than 20",
    ):
        Trainer(config(tmp_path, {}))


def test_eval_size_past_the_eval_split_fails_before_the_model(tmp_path, no_model):
    with pytest.raises(ValueError, match=r"eval_size=5 exceeds the 3 problems"):
        Trainer(config(tmp_path, {"dev_size": 2, "eval_size": 3}, eval_size=5))
