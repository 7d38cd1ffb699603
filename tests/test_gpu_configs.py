"""The GPU recipes under configs/gpu resolve to valid configs whose task options the task
accepts, and every setting's control differs from it only where documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.tasks import task_options
from rlvr.train.config import load_yaml, resolve_config

GPU = Path(__file__).resolve().parents[1] / "configs" / "gpu"
FILES = sorted(GPU.glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_gpu_config_resolves(path):
    cfg = resolve_config(load_yaml(path))
    assert set(cfg.task_options) <= set(task_options(cfg.task))
    assert cfg.policy["lora"]["rank"] == 32 and cfg.rollout_engine == "vllm"
    assert cfg.eval_samples == 12  # AIME 2025 Average@12 / Pass@12
    assert cfg.build_recipe().fp32_head


def _differences(a: str, b: str) -> set[str]:
    x, y = (resolve_config(load_yaml(GPU / f)).to_dict() for f in (a, b))
    return {k for k in x if x[k] != y[k]}


def test_controls_differ_only_in_the_recipe_and_output():
    recipe_keys = {"recipe", "advantage", "kl", "kl_coef", "out"}
    assert _differences("grpo_gsm8k.yaml", "grpo_gsm8k_control.yaml") <= recipe_keys
    for setting in ("dapo_dapo_math.yaml", "gspo_dapo_math.yaml"):
        changed = _differences(setting, "dapo_math_grpo_control.yaml")
        # every difference is a recipe field (the recipes differ), never data/model/budget
        assert not changed & {"task", "task_options", "model", "policy", "steps",
                              "prompts_per_step", "group_size", "max_new_tokens", "lr",
                              "eval_samples", "seed"}  # fmt: skip
