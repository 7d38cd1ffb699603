"""Fixtures for end-to-end tests on the embedded model (warm start cached on first use)."""

from __future__ import annotations

import pytest

from rlvr.train.config import resolve_config

SMALL = {
    "task_options": {"digits": 2, "ops": "+"},
    "prompts_per_step": 4,
    "group_size": 4,
    "max_new_tokens": 14,
    "eval_size": 16,
    "eval_every": 2,
    "progress": False,
}


@pytest.fixture
def small_config(tmp_path):
    """A factory of small, fast training configs writing under tmp_path."""

    def make(**overrides):
        values = {**SMALL, "out": str(tmp_path / "run"), **overrides}
        return resolve_config(values)

    return make
