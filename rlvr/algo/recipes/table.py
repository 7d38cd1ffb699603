"""The named recipes of docs/algorithms.md §8: each a frozen dataclass of independent choices.

This is the only place where a method's name means anything: the loop and the loss read
the fields, never the name. Every field can be overridden (`get_recipe("dapo",
clip_high=0.3)`); `recipe_fields` explains each field for `rlvr recipes` and the docs. The
fields and their docs are in `recipe_choices.py`, the checks each recipe passes in
`recipe_checks.py`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields

from rlvr.algo.recipes.checks import check_recipe
from rlvr.algo.recipes.choices import RecipeChoices
from rlvr.algo.registry import SURROGATES
from rlvr.algo.teacher import NO_OUTCOME


@dataclass(frozen=True)
class Recipe(RecipeChoices):
    """A policy-optimization method as a combination of design choices (docs/algorithms.md)."""

    def __post_init__(self) -> None:
        check_recipe(self)


_SAPO = "Gao 2025, SAPO (arXiv 2511.20347)"
_GMPO = "Zhao 2025, GMPO (arXiv 2507.20673)"
_COV = "Cui 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv 2505.22617)"
_GRPO = "Shao 2024, DeepSeekMath (arXiv 2402.03300)"
_OPD = "Agarwal 2024, GKD (arXiv 2306.13649); Thinking Machines 2025, On-Policy Distillation"
_OPSD = "Zhao 2026, OPSD (arXiv 2601.18734): the frozen student as teacher, seeing the solution"
_AGENT_OPSD = (
    "AgentOPSD (arXiv 2608.05987): the current policy with a task-type skill as teacher; "
    "turn weights in [0.8, 1.2], λ = 0.5, γ = 0.95"
)
# The abstract gives only the ratio's prefix minimum (j < t); the surrogate it feeds is not
# established (docs/methods.md), so both forms in circulation are recipes.
_MINPRO = "Lei 2026, MinPRO (arXiv 2601.22718): prefix minimum j<t per its abstract"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("grpo", _GRPO, kl="k3", kl_coef=0.04),
        Recipe(
            "grpo_trl_vllm",
            f"{_GRPO}; TRL GRPOTrainer defaults: loss_type dapo, beta 0, vLLM importance "
            "sampling sequence_mask with cap 3",
            aggregation="token_mean",
            rollout_correction="sequence_mis",
            rc_upper=3.0,
        ),
        Recipe(
            "dr_grpo",
            "Liu 2025, Dr. GRPO (arXiv 2503.20783)",
            advantage="group_mean",
            aggregation="constant",
        ),
        Recipe(
            "dapo",
            "Yu 2025, DAPO (arXiv 2503.14476)",
            clip_high=0.28,
            aggregation="token_mean",
            dynamic_sampling=True,
            overlong_penalty=True,
        ),
        Recipe(
            "gspo",
            "Zheng 2025, GSPO (arXiv 2507.18071)",
            ratio="sequence",
            clip_low=3e-4,
            clip_high=4e-4,
            zero_adv_skip=True,
        ),
        Recipe(
            "cispo",
            "MiniMax 2025, CISPO (arXiv 2506.13585)",
            surrogate="cispo",
            clip_low=1.0,
            clip_high=3.0,
            aggregation="token_mean",
        ),
        Recipe(
            "ppo",
            "Schulman 2017, PPO (arXiv 1707.06347)",
            advantage="gae",
            aggregation="token_mean",
            kl="k1",
            kl_coef=0.001,
            kl_in_reward=True,
            whiten_advantages=True,
        ),
        Recipe(
            "rloo",
            "Ahmadian 2024, RLOO (arXiv 2402.14740)",
            advantage="rloo",
            aggregation="seq_mean_token_sum",
        ),
        Recipe(
            "reinforce_pp",
            "Hu 2025, REINFORCE++ (arXiv 2501.03262)",
            advantage="reinforce_pp",
            aggregation="token_mean",
            kl="k1",
            kl_coef=0.01,
            kl_in_reward=True,
        ),
        Recipe(
            "vapo",
            "Yue 2025, VAPO (arXiv 2504.05118)",
            advantage="vapo_gae",
            clip_high=0.28,
            aggregation="token_mean",
            value_pretrain_steps=20,
            nll_coef=0.1,
        ),
        Recipe(
            "minpro",
            f"{_MINPRO}; CISPO-style weight in [0, 4] is rlvr's choice",
            ratio="prefix_min",
            surrogate="cispo",
            clip_low=1.0,
            clip_high=3.0,
            aggregation="token_mean",
        ),
        Recipe(
            "minpro_clip",
            f"{_MINPRO}; PPO hard clip 0.2/0.28, as reported of a third-party reimplementation",
            ratio="prefix_min",
            surrogate="clip",
            clip_low=0.2,
            clip_high=0.28,
            aggregation="token_mean",
        ),
        Recipe(
            "scalerl",
            "Khatri 2025, ScaleRL (arXiv 2510.13786)",
            advantage="batch_norm",
            surrogate="cispo",
            clip_low=1.0,
            clip_high=3.0,
            aggregation="prompt_mean",
            zero_variance_filter=True,
            retire_threshold=0.9,
            fp32_head=True,
        ),
        # Distillation (agentic-rl-lab ch. 2 and 4): the teacher's reverse KL alone, under
        # importance sampling without a clip; the two differ only in the config's teacher.
        Recipe(
            "opd",
            _OPD,
            advantage=NO_OUTCOME,
            surrogate="reinforce",
            aggregation="token_mean",
            teacher_kl_coef=1.0,
        ),
        Recipe(
            "opsd",
            _OPSD,
            advantage=NO_OUTCOME,
            surrogate="reinforce",
            aggregation="token_mean",
            teacher_kl_coef=1.0,
        ),
        # AgentOPSD (agentic-rl-lab ch. 09-AgentOPSD): GRPO's outcome advantage rescaled per
        # agent turn by a skill-prompted self-teacher; the lab's PPO clip 0.8/1.24.
        Recipe(
            "agent_opsd",
            _AGENT_OPSD,
            advantage="turn_belief",
            clip_low=0.2,
            clip_high=0.24,
            aggregation="token_mean",
        ),
        # Second-generation surrogates (issue 29), each with the defaults of the peer code
        # it is checked against (tests/algo/peers): verl core_algos.py, TRL grpo_trainer.py.
        Recipe("sapo", f"{_SAPO}; verl loss_mode=sapo, TRL loss_type=sapo", surrogate="sapo"),
        Recipe(
            "gmpo",
            f"{_GMPO}; verl loss_mode=geo_mean, TRL GMPOTrainer: log-ratio clip ±0.4",
            surrogate="gmpo",
            clip_low=0.4,
            clip_high=0.4,
        ),
        Recipe(
            "clip_cov",
            f"{_COV}; verl loss_mode=clip_cov",
            surrogate="clip_cov",
            aggregation="token_mean",
        ),
        Recipe(
            "kl_cov",
            f"{_COV}; verl loss_mode=kl_cov",
            surrogate="kl_cov",
            aggregation="token_mean",
        ),
        Recipe(
            "dppo",
            "Qi 2026, DPPO-Binary-TV (arXiv 2602.04879); TRL DPPOTrainer (binary_tv)",
            surrogate="dppo_tv",
            clip_low=0.15,
            clip_high=0.15,
            aggregation="token_mean",
        ),
    )
}


def clip_band(recipe: Recipe) -> str:
    """The surrogate's trust region as `rlvr recipes` prints it, read from its registered
    `bounds`: ratio bounds, log-ratio bounds as ratios, DPPO's probability change, or —."""
    kind = SURROGATES.get(recipe.surrogate).bounds
    low, high = recipe.clip_low, recipe.clip_high
    if kind == "log_ratio":
        return f"{math.exp(-low):.3g}..{math.exp(high):.3g}"
    if kind == "probability":
        return f"Δπ −{low:g}..+{high:g}"
    if kind == "none":
        return "—"
    return f"{1 - low:g}..{1 + high:g}"


def recipe_fields() -> dict[str, str]:
    """Field name → its one-line documentation."""
    return {f.name: f.metadata.get("doc", "") for f in fields(Recipe)}


def get_recipe(name: str, **overrides: object) -> Recipe:
    """The named recipe with fields overridden; errors name the bad name or field."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
    valid = recipe_fields()
    for key in overrides:
        if key not in valid or key == "name":
            raise ValueError(f"unknown recipe field {key!r}; valid: {', '.join(sorted(valid))}")
    return dataclasses.replace(RECIPES[name], **overrides)
