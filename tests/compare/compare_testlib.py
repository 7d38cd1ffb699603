"""Shared helpers of the comparison tests: a tiny matrix spec."""

from __future__ import annotations

from rlvr.compare import spec_from_dict
from rlvr.compare.matrix import MatrixSpec

TINY = {
    "task_options": {"digits": 2, "ops": "+"},
    "prompts_per_step": 4,
    "group_size": 4,
    "max_new_tokens": 14,
    "eval_size": 16,
    "eval_every": 1,
}


def tiny_spec(**changes) -> MatrixSpec:
    data = {
        "base": dict(TINY),
        "recipes": ["grpo", "dr_grpo"],
        "seeds": [0, 1],
        "budget": {"mode": "steps", "value": 2},
        **changes,
    }
    return spec_from_dict(data)
