"""Every config under configs/ resolves; the GPU recipes under configs/gpu have task options
their task accepts, and each setting differs from its matched control in exactly the
fields its method defines (docs/gpu.md), each holding its recipe's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.algo.recipes import RECIPES, recipe_fields
from rlvr.tasks import task_options
from rlvr.train.config import load_yaml, resolve_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GPU = CONFIGS / "gpu"
ALL = sorted(CONFIGS.rglob("*.yaml"))
FILES = sorted(GPU.glob("*.yaml"))

TOOL_FIELDS = {"tools", "tool_format", "episode"}
# (setting, control) → the fields the setting's method changes (docs/gpu.md, "What differs")
METHOD_FIELDS = {
    ("grpo_gsm8k", "grpo_gsm8k_control"): {"advantage"},
    ("dapo_dapo_math", "dapo_math_grpo_control"): {
        "recipe",
        "clip_high",
        "aggregation",
        "dynamic_sampling",
        "overlong_penalty",
    },
    ("gspo_dapo_math", "dapo_math_grpo_control"): {"recipe", "ratio", "clip_low", "clip_high"},
    # on-policy distillation (agentic-rl-lab chapters 2 and 4): the teacher term replaces
    # the outcome advantage; GRPO's clipped surrogate, its aggregation and no teacher
    ("opd_deepmath", "opd_deepmath_grpo_control"): {
        "recipe",
        "advantage",
        "surrogate",
        "aggregation",
        "teacher_kl_coef",
        "teacher",
    },
    # ... and GRPO needs a group: the lab's 32 problems × 1 sample vs 4 × 8 (32 responses)
    ("opsd_openthoughts_math", "opsd_openthoughts_math_grpo_control"): {
        "recipe",
        "advantage",
        "surrogate",
        "aggregation",
        "teacher_kl_coef",
        "teacher",
        "prompts_per_step",
        "group_size",
    },
    # agentic RL (agentic-rl-lab chapters 3 and 5): the tools through the chat template and
    # the episode budgets that only a multi-turn run has; a one-turn control without them
    ("searchr1_nq_hotpotqa", "searchr1_nq_hotpotqa_control"): TOOL_FIELDS,
    ("retool_dapo_math", "retool_dapo_math_control"): TOOL_FIELDS,
}
# the lab's LoRA rank: 32 in every chapter but OPSD's (04-opsd/01-opsd-async.py: 64)
LORA_RANK = {"opsd_openthoughts_math": 64, "opsd_openthoughts_math_grpo_control": 64}


def _resolved(name: str) -> dict:
    return resolve_config(load_yaml(GPU / f"{name}.yaml")).to_dict()


@pytest.mark.parametrize("path", ALL, ids=[str(p.relative_to(CONFIGS)) for p in ALL])
def test_every_config_resolves(path):
    cfg = resolve_config(load_yaml(path))
    assert set(cfg.task_options) <= set(task_options(cfg.task))
    cfg.build_recipe()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_gpu_config_resolves(path):
    cfg = resolve_config(load_yaml(path))
    assert cfg.policy["lora"]["rank"] == LORA_RANK.get(path.stem, 32)
    assert cfg.rollout_engine == "vllm"
    # AIME 2025 Average@12 / Pass@12; 4 samples of each of 500 held-out QA questions
    assert cfg.eval_samples == (4 if path.stem.startswith("searchr1") else 12)
    assert cfg.build_recipe().fp32_head


def test_every_gpu_config_is_in_a_matched_pair():
    paired = {name for pair in METHOD_FIELDS for name in pair}
    assert paired == {p.stem for p in FILES}


@pytest.mark.parametrize(("setting", "control"), list(METHOD_FIELDS), ids=lambda n: n)
def test_setting_and_control_differ_only_in_the_method(setting, control):
    a, b = _resolved(setting), _resolved(control)
    changed = {k for k in a if a[k] != b[k]} - {"out"}
    assert changed == METHOD_FIELDS[(setting, control)]
    assert a["out"] != b["out"]
    # the method fields hold the named recipe's own values, on both sides (the GSM8K
    # setting's advantage is the one override of its recipe: the lab's r − mean(r))
    for cfg in (a, b):
        for field in (changed - {"recipe"}) & set(recipe_fields()):
            expected = getattr(RECIPES[cfg["recipe"]], field)
            if cfg is a and setting == "grpo_gsm8k":
                expected = "group_mean"
            assert cfg[field] == expected, (cfg["recipe"], field)
    assert a["kl"] is None and a["kl_coef"] == 0.0  # no KL in any arm (shared)


@pytest.mark.parametrize("name", ["searchr1_nq_hotpotqa", "retool_dapo_math"])
def test_the_agentic_settings_hold_the_labs_budgets(name):
    cfg = _resolved(name)
    assert cfg["tool_format"] == "qwen_xml" and cfg["policy"]["enable_thinking"] is False
    assert (cfg["prompts_per_step"], cfg["group_size"], cfg["max_new_tokens"]) == (8, 8, 8192)
    episode = cfg["episode"]
    assert (episode["max_turns"], episode["max_tool_calls"], episode["max_turn_tokens"]) == (
        6,
        4,
        1024,
    )
    (tool,) = cfg["tools"]
    if name == "retool_dapo_math":  # 30 s per sandbox run, PPO clip 0.2 / 0.28
        assert tool["options"] == {"timeout_s": 30} and tool["timeout_s"] > 30
        assert (cfg["clip_low"], cfg["clip_high"]) == (0.2, 0.28)
    else:  # BM25 over a local corpus, top 3 passages
        assert tool["factory"] == "rlvr.tools.search:make_search_tool"
        assert tool["options"]["top_k"] == 3 and cfg["task_options"]["verifier"] == "exact_match"
