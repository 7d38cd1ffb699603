"""Every named recipe runs end to end on the embedded model through the one loop."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlvr.algo.recipes import RECIPES
from rlvr.runlog.logger import read_metrics
from rlvr.train import run_training

REQUIRED = (
    "reward/mean",
    "reward/accuracy",
    "rollout/generated_tokens",
    "rollout/trained_tokens",
    "rollout/discarded_tokens",
    "rollout/candidate_groups",
    "rollout/kept_groups",
    "rollout/refill_rounds",
    "time/rollout_s",
    "time/train_s",
    "train/update_skipped",
)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_runs_two_steps(recipe, small_config):
    extra = {"value_pretrain_steps": 1} if recipe == "vapo" else {}
    if RECIPES[recipe].needs_teacher:  # opd, opsd, agent_opsd: the frozen student sees the answer
        extra["teacher"] = {"model": "self", "prompt_template": "{prompt}{answer}\n{prompt}"}
    cfg = small_config(recipe=recipe, steps=2, **extra)
    summary = run_training(cfg)
    out = Path(cfg.out)
    records = read_metrics(out / "metrics.jsonl")
    steps = [r for r in records if r["step"] >= 1]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        missing = [k for k in REQUIRED if k not in record]
        assert not missing, f"{recipe} step {record['step']} lacks {missing}"
        if record["train/update_skipped"] == 0.0:
            assert "loss/policy" in record and math.isfinite(record["loss/policy"])
    initial = next(r for r in records if r["step"] == 0)
    assert "eval/accuracy" in initial and "eval/accuracy" in records[-1]
    assert 0.0 <= summary["final"]["eval/accuracy"] <= 1.0
    for name in ("config.yaml", "summary.json", "curves.png", "checkpoint/trainer_state.pt"):
        assert (out / name).exists(), name
    assert json.loads((out / "summary.json").read_text())["recipe"] == recipe
