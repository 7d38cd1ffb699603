"""The named recipes of docs/algorithms.md §8 and their validation."""

import math

import pytest

from rlvr.algo import RECIPES, Recipe, get_recipe, recipe_fields

NAMES = {
    "grpo", "dr_grpo", "dapo", "gspo", "cispo", "ppo",
    "rloo", "reinforce_pp", "vapo", "minpro", "minpro_clip", "scalerl", "opd", "opsd",
}  # fmt: skip

# name → (advantage, ratio, surrogate, 1 − clip_low, 1 + clip_high, aggregation, kl, in reward)
TABLE = {
    "grpo": ("group_norm", "token", "clip", 0.8, 1.2, "seq_mean_token_mean", "k3", False),
    "dr_grpo": ("group_mean", "token", "clip", 0.8, 1.2, "constant", None, False),
    "dapo": ("group_norm", "token", "clip", 0.8, 1.28, "token_mean", None, False),
    "gspo": (
        "group_norm",
        "sequence",
        "clip",
        1 - 3e-4,
        1 + 4e-4,
        "seq_mean_token_mean",
        None,
        False,
    ),
    "cispo": ("group_norm", "token", "cispo", 0.0, 4.0, "token_mean", None, False),
    "ppo": ("gae", "token", "clip", 0.8, 1.2, "token_mean", "k1", True),
    "rloo": ("rloo", "token", "clip", 0.8, 1.2, "seq_mean_token_sum", None, False),
    "reinforce_pp": ("reinforce_pp", "token", "clip", 0.8, 1.2, "token_mean", "k1", True),
    "vapo": ("vapo_gae", "token", "clip", 0.8, 1.28, "token_mean", None, False),
    "minpro": ("group_norm", "prefix_min", "cispo", 0.0, 4.0, "token_mean", None, False),
    "minpro_clip": ("group_norm", "prefix_min", "clip", 0.8, 1.28, "token_mean", None, False),
    "scalerl": ("batch_norm", "token", "cispo", 0.0, 4.0, "prompt_mean", None, False),
    "opd": ("none", "token", "reinforce", 0.8, 1.2, "token_mean", None, False),
    "opsd": ("none", "token", "reinforce", 0.8, 1.2, "token_mean", None, False),
}
# Second-generation surrogates (issue 29); gmpo's clip is in log space (±0.4), dppo's is
# DPPO's TV threshold (0.15): the table holds 1 − clip_low and 1 + clip_high as elsewhere.
NEW_SURROGATE_RECIPES = {
    "sapo": ("group_norm", "token", "sapo", 0.8, 1.2, "seq_mean_token_mean", None, False),
    "gmpo": ("group_norm", "token", "gmpo", 0.6, 1.4, "seq_mean_token_mean", None, False),
    "clip_cov": ("group_norm", "token", "clip_cov", 0.8, 1.2, "token_mean", None, False),
    "kl_cov": ("group_norm", "token", "kl_cov", 0.8, 1.2, "token_mean", None, False),
    "dppo": ("group_norm", "token", "dppo_tv", 0.85, 1.15, "token_mean", None, False),
}
NAMES |= set(NEW_SURROGATE_RECIPES)
TABLE.update(NEW_SURROGATE_RECIPES)
# TRL's GRPOTrainer defaults with its vLLM correction (sequence_mis, cap 3): issue 29.
TABLE["grpo_trl_vllm"] = ("group_norm", "token", "clip", 0.8, 1.2, "token_mean", None, False)
NAMES.add("grpo_trl_vllm")
# AgentOPSD (issue 45): GRPO's advantage rescaled per agent turn, the lab's clip 0.8/1.24.
TABLE["agent_opsd"] = ("turn_belief", "token", "clip", 0.8, 1.24, "token_mean", None, False)
NAMES.add("agent_opsd")


def test_all_named_recipes_exist():
    assert set(RECIPES) == NAMES
    assert all(r.name == n for n, r in RECIPES.items())
    assert all(r.source for r in RECIPES.values())


@pytest.mark.parametrize("name", sorted(NAMES))
def test_recipe_defaults_match_algorithms_md(name):
    r = RECIPES[name]
    adv, ratio, surrogate, low, high, aggregation, kl, in_reward = TABLE[name]
    assert (r.advantage, r.ratio, r.surrogate, r.aggregation) == (
        adv,
        ratio,
        surrogate,
        aggregation,
    )
    assert math.isclose(1 - r.clip_low, low, abs_tol=1e-12)
    assert math.isclose(1 + r.clip_high, high, abs_tol=1e-12)
    assert r.kl == kl and r.kl_in_reward == in_reward
    assert (r.kl_coef > 0) == (kl is not None)


def test_recipe_selection_and_extras():
    assert RECIPES["grpo"].kl_coef == 0.04
    assert RECIPES["dapo"].dynamic_sampling and RECIPES["dapo"].overlong_penalty
    assert RECIPES["gspo"].zero_adv_skip
    ppo = RECIPES["ppo"]
    assert ppo.needs_critic and ppo.gamma == 1.0 and ppo.lam == 0.95 and ppo.kl_coef < 0.01
    vapo = RECIPES["vapo"]
    assert vapo.needs_critic and vapo.nll_coef == 0.1 and vapo.value_pretrain_steps > 0
    assert vapo.vapo_alpha == 0.05
    s = RECIPES["scalerl"]
    assert s.zero_variance_filter and s.retire_threshold == 0.9 and s.fp32_head
    others = NAMES - {"dapo"}
    assert not any(RECIPES[n].dynamic_sampling for n in others)
    assert not any(RECIPES[n].needs_critic for n in NAMES - {"ppo", "vapo"})


def test_get_recipe_overrides_and_leaves_registry_alone():
    r = get_recipe("dapo", clip_high=0.3, aggregation="prompt_mean")
    assert (r.name, r.clip_high, r.aggregation, r.dynamic_sampling) == (
        "dapo",
        0.3,
        "prompt_mean",
        True,
    )
    assert RECIPES["dapo"].clip_high == 0.28
    with pytest.raises(AttributeError):
        r.clip_high = 0.5  # frozen


def test_unknown_recipe_is_named():
    with pytest.raises(ValueError, match=r"unknown recipe 'grop'.*grpo"):
        get_recipe("grop")


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"unknown recipe field 'clip_hgh'.*clip_high"):
        get_recipe("grpo", clip_hgh=0.3)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (
            {"advantage": "group_norm", "kl": "k1", "kl_coef": 0.1, "kl_in_reward": True},
            "kl_in_reward",
        ),
        (
            {
                "advantage": "reinforce_pp_baseline",
                "kl": "k1",
                "kl_coef": 0.1,
                "kl_in_reward": True,
            },
            "kl_in_reward",
        ),
        ({"advantage": "median"}, "advantage"),
        ({"ratio": "prefix"}, "ratio"),
        ({"surrogate": "ppo"}, "surrogate"),
        ({"aggregation": "mean"}, "aggregation"),
        ({"kl": "k4"}, "kl"),
        ({"kl_coef": 0.1}, "kl_coef"),
        ({"clip_low": 1.5}, "clip_low"),
        ({"clip_high": -0.1}, "clip_high"),
        ({"overlong_cache": 0}, "overlong_cache"),
        ({"retire_threshold": 1.5}, "retire_threshold"),
    ],
)
def test_invalid_combinations_are_rejected_with_the_field_named(overrides, field):
    with pytest.raises(ValueError, match=field):
        Recipe(**overrides)


def test_kl_in_reward_with_group_norm_rejected_through_get_recipe():
    with pytest.raises(ValueError, match="kl_in_reward"):
        get_recipe("grpo", kl_in_reward=True)


def test_nan_clip_high_is_rejected():
    with pytest.raises(ValueError, match="clip_high"):
        get_recipe("grpo", clip_high=float("nan"))


def test_nan_kl_coef_is_rejected():
    with pytest.raises(ValueError, match="kl_coef"):
        get_recipe("grpo", kl_coef=float("nan"))


def test_every_field_is_documented():
    docs = recipe_fields()
    assert "clip_high" in docs and all(docs.values())
