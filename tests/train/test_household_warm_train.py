"""The embedded policy on the household task's compact text: the warm start builds the
model with the task's longer context and the task's schedule, caches it, and `rlvr train`
runs two RL steps from it (the mechanism, not the success rate: a 2-step warm start)."""

from __future__ import annotations

import json

import pytest

from rlvr.tasks import TASKS
from rlvr.tasks.household import COMPACT_POSITIONS, HouseholdTask
from rlvr.train import run_training
from rlvr.train.config import resolve_config
from rlvr.warmstart import load_policy, warm_start

OPTIONS = {"text": "compact", "train_size": 16, "dev_size": 2, "eval_size": 2}


def test_the_warm_start_takes_the_tasks_context_and_schedule(tmp_path, monkeypatch):
    seen = {}

    def fake_warm_start(task_name, task_options, seed, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr("rlvr.warmstart.load.warm_start", fake_warm_start)
    with pytest.raises(RuntimeError, match="stop here"):
        load_policy("embedded", "household", OPTIONS, 0, max_steps=2, batch_size=4)
    # The task's schedule, with what the caller passes on top.
    assert seen == {**HouseholdTask.embedded_warm_start, "max_steps": 2, "batch_size": 4}
    assert TASKS["arithmetic"].__dict__.get("embedded_warm_start") is None  # others unchanged

    model, _, info = warm_start(
        "household", OPTIONS, 0, max_steps=1, batch_size=2, cache_dir=tmp_path, progress=False
    )
    assert model.config.max_position_embeddings == COMPACT_POSITIONS
    assert info["settings"]["model"]["max_positions"] == COMPACT_POSITIONS
    assert (info["steps"], info["cache_hit"]) == (1, False)
    again = warm_start(
        "household", OPTIONS, 0, max_steps=1, batch_size=2, cache_dir=tmp_path, progress=False
    )
    assert again[2]["cache_hit"]


def test_two_rl_steps_on_the_household_task_from_the_embedded_warm_start(tmp_path):
    cfg = resolve_config(
        {
            "task": "household",
            "task_options": {**OPTIONS, "max_steps": 4},
            "warm_target": 1.0,  # never reached: the warm start stops at warm_max_steps
            "warm_max_steps": 2,
            "steps": 2,
            "prompts_per_step": 2,
            "group_size": 2,
            "eval_every": 2,
            "eval_size": 2,
            "save_every": 0,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    with pytest.warns(UserWarning, match="warm start on 'household' stopped after 2 steps"):
        summary = run_training(cfg)
    assert summary["steps"] == 2
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert any("env/valid_call_rate" in m for m in metrics)  # the episodes ran commands
