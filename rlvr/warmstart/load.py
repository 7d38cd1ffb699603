"""Load a policy by name: the embedded warm-started tiny model, a local path or a hub id."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel

from rlvr.models.load import EMBEDDED, load_pretrained
from rlvr.models.tokenizer import Tokenizer
from rlvr.tasks import TASKS
from rlvr.warmstart.supervised import warm_start
from rlvr.warmstart.vision import warm_start_vision


def load_policy(
    model: str, task_name: str, task_options: dict[str, Any], seed: int, **warm_kw: Any
) -> tuple[PreTrainedModel, Tokenizer, dict[str, Any]]:
    """`"embedded"`: the tiny Qwen2 warm-started on the task (cached; `warm_kw` go to
    `warm_start`), or for a task that shows images the tiny VLM (`warm_start_vision`).
    Anything else: a local directory or hub id for `from_pretrained`.
    Returns (model in train mode, tokenizer, info)."""
    if model == EMBEDDED and getattr(TASKS.get(task_name), "shows_images", False):
        return warm_start_vision(task_name, task_options, seed, **warm_kw)  # the tiny VLM
    if model == EMBEDDED:
        # A task may set its own schedule (household: smaller batches, a faster rate);
        # what the caller passes wins.
        schedule = getattr(TASKS.get(task_name), "embedded_warm_start", {})
        return warm_start(task_name, task_options, seed, **{**schedule, **warm_kw})
    if warm_kw:
        raise ValueError(
            f"warm-start options {sorted(warm_kw)} only apply to model={EMBEDDED!r}, "
            f"not model={model!r}"
        )
    return load_pretrained(model)
