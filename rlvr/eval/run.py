"""Evaluate a saved or embedded policy on a task split (`rlvr eval`)."""

from __future__ import annotations

from typing import Any

from rlvr.eval.evaluate import evaluate_policy
from rlvr.models import load_policy
from rlvr.rollout import HFEngine
from rlvr.tasks import SPLITS, make_task


def evaluate_model(
    model: str,
    task_name: str,
    task_options: dict[str, Any],
    *,
    split: str = "eval",
    size: int = 0,
    samples: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 14,
    seed: int = 0,
) -> dict[str, float]:
    """Metrics of `model` ('embedded', a directory such as runs/demo/checkpoint/policy, or
    a hub id) on the first `size` problems of `split` (0: all)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid; choose one of: {', '.join(SPLITS)}")
    task = make_task(task_name, **task_options)
    policy, tokenizer, _ = load_policy(model, task_name, task_options, 0)
    problems = task.problems(split)
    problems = problems[:size] if size else problems
    result = evaluate_policy(
        HFEngine(policy, tokenizer),
        task,
        problems,
        samples=samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    return {"eval/items": float(len(problems)), **result.metrics}
