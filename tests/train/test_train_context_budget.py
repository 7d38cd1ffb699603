"""A run whose prompt + max_new_tokens cannot fit in the model's context is refused before
any generation, with max_new_tokens, the context length and the longest prompt named."""

from __future__ import annotations

import re

import pytest
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.rollout import HFEngine
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_hf_model(tmp_path_factory.mktemp("tiny_qwen2")))  # context 512


@pytest.fixture
def no_generation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("generated before the budget was checked")

    monkeypatch.setattr(HFEngine, "generate_ids", refuse)


def config(model_dir, tmp_path, max_new_tokens):
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(12))
    return resolve_config(
        {
            "model": model_dir,
            "task": "gsm8k",
            "task_options": {"data": data, "dev_size": 2, "eval_size": 2},
            "eval_size": 2,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": max_new_tokens,
            "progress": False,
            "out": str(tmp_path / "run"),
            "policy": {"chat_template": True},
        }
    )


def test_max_new_tokens_alone_past_the_context_is_refused(model_dir, tmp_path, no_generation):
    with pytest.raises(
        ValueError, match=r"max_new_tokens=4096 does not fit in the model's context length of 512"
    ):
        Trainer(config(model_dir, tmp_path, 4096))


def test_prompt_plus_max_new_tokens_past_the_context_is_refused(model_dir, tmp_path, no_generation):
    with pytest.raises(ValueError) as refused:
        Trainer(config(model_dir, tmp_path, 500))
    message = str(refused.value)
    found = re.search(r"max_new_tokens=500 plus the longest prompt \((\d+) tokens\)", message)
    assert found and "context length of 512" in message
    longest = int(found.group(1))
    assert longest + 500 > 512
    assert f"use max_new_tokens ≤ {512 - longest}" in message
    # exactly filling the context is allowed
    Trainer(config(model_dir, tmp_path, 512 - longest))
