"""The checks a `Recipe` runs on construction: each bad field, or combination of fields
that would silently do nothing, is rejected with an error naming the field, its value and
what would be valid (STYLE 10)."""

from __future__ import annotations

from dataclasses import fields

from rlvr.algo.policy.rollout_correction import REJECT_STATISTICS, ROLLOUT_CORRECTIONS
from rlvr.algo.recipes.choices import RecipeChoices, choice_names
from rlvr.algo.registry import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, RATIOS, SURROGATES
from rlvr.algo.selection import SAMPLING_KEYS
from rlvr.algo.teacher import NO_OUTCOME
from rlvr.checks import check_field_types


def check_recipe(recipe: RecipeChoices) -> None:
    """Raise ValueError on the first field, or combination of fields, that is not valid."""
    check_field_types(recipe)
    _check_choices(recipe)
    _check_ranges(recipe)
    _check_teacher(recipe)
    _check_turn_fields(recipe)
    _check_correction(recipe)
    _check_surrogate_fields(recipe)
    _check_entropy(recipe)
    _check_sampling(recipe)


def _check_choices(recipe: RecipeChoices) -> None:
    """Each named choice is registered; clip, KL, overlong and retire settings are valid."""
    # Each lookup raises an error naming the field, the value and the registered names.
    advantage = ADVANTAGES.get(recipe.advantage)
    RATIOS.get(recipe.ratio)
    SURROGATES.get(recipe.surrogate)
    AGGREGATIONS.get(recipe.aggregation)
    if recipe.kl is not None:
        KL_ESTIMATORS.get(recipe.kl)
    if not 0.0 <= recipe.clip_low <= 1.0:
        raise ValueError(f"clip_low must be in [0, 1] (bound 1 − clip_low), got {recipe.clip_low}")
    if recipe.clip_high < 0.0:
        raise ValueError(f"clip_high must be ≥ 0, got {recipe.clip_high}")
    if recipe.kl_in_reward and not advantage.token_rewards:
        token = [e.name for e in ADVANTAGES if e.token_rewards]
        raise ValueError(
            f"kl_in_reward=True needs a token-reward advantage "
            f"({', '.join(sorted(token))}), got advantage={recipe.advantage!r}"
        )
    if recipe.kl_coef < 0:
        raise ValueError(f"kl_coef must be ≥ 0, got {recipe.kl_coef}")
    if recipe.kl_coef and recipe.kl is None:
        raise ValueError(
            f"kl_coef={recipe.kl_coef} needs kl set to one of {choice_names(KL_ESTIMATORS)}"
        )
    if recipe.overlong_cache < 1:
        raise ValueError(f"overlong_cache must be ≥ 1, got {recipe.overlong_cache}")
    if recipe.retire_threshold is not None and not 0.0 < recipe.retire_threshold <= 1.0:
        raise ValueError(f"retire_threshold must be in (0, 1], got {recipe.retire_threshold}")


def _check_ranges(recipe: RecipeChoices) -> None:
    """Numeric fields outside the range their formula admits are rejected by name."""
    checks = {
        "gamma": 0.0 < recipe.gamma <= 1.0,
        "lam": 0.0 <= recipe.lam <= 1.0,
        "vapo_alpha": recipe.vapo_alpha > 0.0,
        "dual_clip_c": recipe.dual_clip_c > 1.0,
        "tis_cap": recipe.tis_cap is None or recipe.tis_cap > 0.0,
        "value_clip": recipe.value_clip is None or recipe.value_clip > 0.0,
        "value_pretrain_steps": recipe.value_pretrain_steps >= 0,
        "nll_coef": recipe.nll_coef >= 0.0,
        "entropy_coef": recipe.entropy_coef >= 0.0,
        "entropy_target": recipe.entropy_target is None or recipe.entropy_target >= 0.0,
        "entropy_coef_delta": recipe.entropy_coef_delta >= 0.0,
        "entropy_coef_min": recipe.entropy_coef_min >= 0.0,
        "entropy_coef_max": recipe.entropy_coef_max >= recipe.entropy_coef_min,
        "teacher_kl_coef": recipe.teacher_kl_coef >= 0.0,
        "teacher_weight": recipe.teacher_weight > 0.0,
        "sapo_tau_pos": recipe.sapo_tau_pos > 0.0,
        "sapo_tau_neg": recipe.sapo_tau_neg > 0.0,
        "cov_ratio": 0.0 < recipe.cov_ratio <= 1.0,
        "clip_cov_ub": recipe.clip_cov_ub > recipe.clip_cov_lb,
        "kl_cov_coef": recipe.kl_cov_coef >= 0.0,
        "is_cap": recipe.is_cap > 0.0,
        "top_entropy_quantile": 0.0 <= recipe.top_entropy_quantile <= 1.0,
        "turn_decay": 0.0 < recipe.turn_decay <= 1.0,
        "turn_lambda": 0.0 <= recipe.turn_lambda <= 1.0,
        "turn_weight_bound": 0.0 <= recipe.turn_weight_bound < 1.0,
    }
    valid = {
        "gamma": "in (0, 1]",
        "lam": "in [0, 1]",
        "vapo_alpha": "> 0",
        "dual_clip_c": "> 1",
        "tis_cap": "> 0 or None",
        "value_clip": "> 0 or None",
        "value_pretrain_steps": "≥ 0",
        "nll_coef": "≥ 0",
        "entropy_coef": "≥ 0",
        "entropy_target": "≥ 0 or None",
        "entropy_coef_delta": "≥ 0",
        "entropy_coef_min": "≥ 0",
        "entropy_coef_max": "≥ entropy_coef_min",
        "teacher_kl_coef": "≥ 0",
        "teacher_weight": "> 0",
        "sapo_tau_pos": "> 0",
        "sapo_tau_neg": "> 0",
        "cov_ratio": "in (0, 1]",
        "clip_cov_ub": "> clip_cov_lb",
        "kl_cov_coef": "≥ 0",
        "is_cap": "> 0",
        "top_entropy_quantile": "in [0, 1]",
        "turn_decay": "in (0, 1]",
        "turn_lambda": "in [0, 1]",
        "turn_weight_bound": "in [0, 1) (so a turn's multiplier stays > 0: no sign flip)",
    }
    for name, ok in checks.items():
        if not ok:
            raise ValueError(f"{name} must be {valid[name]}, got {getattr(recipe, name)!r}")


def _check_correction(recipe: RecipeChoices) -> None:
    """Rollout-correction fields are valid and can take effect."""
    if recipe.rollout_correction is not None:
        ROLLOUT_CORRECTIONS.get(recipe.rollout_correction)  # names the valid choices
        if recipe.tis_cap is not None:
            raise ValueError(
                f"tis_cap={recipe.tis_cap} and rollout_correction="
                f"{recipe.rollout_correction!r} both set a correction; tis_cap C is "
                f"rollout_correction=token_tis with rc_upper=C: keep one"
            )
        if recipe.rc_lower is None and recipe.rc_upper is None:
            raise ValueError(
                f"rollout_correction={recipe.rollout_correction!r} with rc_lower and rc_upper "
                f"both None has no band to act on; set rc_upper (e.g. 2.0) or rc_lower"
            )
    elif recipe.tis_cap is not None and (recipe.rc_lower is not None or recipe.rc_upper != 2.0):
        raise ValueError(
            f"rc_lower/rc_upper ({recipe.rc_lower}, {recipe.rc_upper}) do not apply to "
            f"tis_cap={recipe.tis_cap} (its band is (−∞, tis_cap]); use rollout_correction="
            f"token_tis with rc_lower/rc_upper instead"
        )
    for name in ("rc_lower", "rc_upper", "rc_reject_max", "offpolicy_mask_delta"):
        value = getattr(recipe, name)
        if value is not None and not (value >= 0 if name == "offpolicy_mask_delta" else value > 0):
            valid = "≥ 0" if name == "offpolicy_mask_delta" else "> 0"
            raise ValueError(f"{name} must be {valid} or None, got {value!r}")
    bounds = (recipe.rc_lower, recipe.rc_upper)
    if None not in bounds and bounds[0] >= bounds[1]:
        raise ValueError(f"rc_lower={recipe.rc_lower} must be below rc_upper={recipe.rc_upper}")
    if recipe.rc_reject is not None and recipe.rc_reject not in REJECT_STATISTICS:
        raise ValueError(
            f"rc_reject must be one of {', '.join(REJECT_STATISTICS)} or None, got "
            f"{recipe.rc_reject!r}"
        )
    if (recipe.rc_reject is None) != (recipe.rc_reject_max is None):
        raise ValueError(
            f"rc_reject={recipe.rc_reject!r} and rc_reject_max={recipe.rc_reject_max!r} go "
            f"together: set both (e.g. rc_reject=seq_mean_k3, rc_reject_max=0.01) or neither"
        )


def _check_teacher(recipe: RecipeChoices) -> None:
    """Teacher fields that cannot take effect without a teacher term are rejected."""
    if recipe.teacher_kl_coef:
        return
    if recipe.advantage == NO_OUTCOME:
        raise ValueError(
            f"advantage={NO_OUTCOME!r} with teacher_kl_coef=0 gives every token a zero "
            f"advantage, so nothing trains; set teacher_kl_coef > 0 (a teacher's term) or "
            f"choose an outcome advantage ({', '.join(ADVANTAGES.names()[:4])}, ...)"
        )
    if recipe.teacher_weight != 1.0:
        raise ValueError(
            f"teacher_weight={recipe.teacher_weight!r} weighs the teacher's term, which "
            f"teacher_kl_coef=0 turns off; set teacher_kl_coef > 0 or remove teacher_weight"
        )


_TURN_FIELDS = ("turn_decay", "turn_lambda", "turn_weight_bound")


def _check_turn_fields(recipe: RecipeChoices) -> None:
    """AgentOPSD's fields moved off their defaults under an advantage that does not read
    them would silently do nothing."""
    defaults = {f.name: f.default for f in fields(RecipeChoices)}
    reads = ":" in recipe.advantage or ADVANTAGES.get(recipe.advantage).needs_teacher
    moved = [
        f"{n}={getattr(recipe, n)!r}" for n in _TURN_FIELDS if getattr(recipe, n) != defaults[n]
    ]
    if moved and not reads:
        raise ValueError(
            f"{', '.join(moved)} shape AgentOPSD's turn credit, which advantage="
            f"{recipe.advantage!r} does not read; set advantage='turn_belief' or remove them"
        )


# Fields only some surrogates read: set on another built-in surrogate they cannot take effect.
_SURROGATE_FIELDS = {
    "sapo_tau_pos": ("sapo",),
    "sapo_tau_neg": ("sapo",),
    "cov_ratio": ("clip_cov", "kl_cov"),
    "clip_cov_lb": ("clip_cov",),
    "clip_cov_ub": ("clip_cov",),
    "kl_cov_coef": ("kl_cov",),
    "is_cap": ("dppo_tv",),
    "dppo_anchor": ("dppo_tv",),
}


def _check_surrogate_fields(recipe: RecipeChoices) -> None:
    """A surrogate's own field moved off its default under another built-in surrogate, or
    a KL correction without a KL in the loss, is an error: it would silently do nothing."""
    defaults = {f.name: f.default for f in fields(RecipeChoices)}
    for name, readers in _SURROGATE_FIELDS.items():
        moved = getattr(recipe, name) != defaults[name]
        if moved and ":" not in recipe.surrogate and recipe.surrogate not in readers:
            raise ValueError(
                f"{name}={getattr(recipe, name)!r} is read only by surrogate "
                f"{' or '.join(readers)}, not {recipe.surrogate!r}; remove it or change surrogate"
            )
    if recipe.surrogate == "gmpo" and RATIOS.get(recipe.ratio).sequence_level:
        raise ValueError(
            f"surrogate='gmpo' takes the token ratio and forms its own geometric mean; "
            f"ratio={recipe.ratio!r} is already per sequence: set ratio='token'"
        )
    folds = SURROGATES.get(recipe.surrogate).sequence_mean
    if folds and recipe.correction[0] == "token_mis":
        raise ValueError(
            f"surrogate={recipe.surrogate!r} with rollout_correction='token_mis': one loss per "
            "response takes the geometric mean of the token weights (verl), and a weight of 0 "
            "has none (verl's log(0 + 1e-10) scales the response by 10^(−10/|y|)); use "
            "token_tis, token_rs (the token leaves the mean) or geometric_mis"
        )
    if recipe.zero_adv_skip and recipe.top_entropy_quantile < 1.0:
        raise ValueError(
            f"zero_adv_skip=True with top_entropy_quantile={recipe.top_entropy_quantile}: the "
            "entropy quantile is taken over each micro-batch's tokens, which skipping rows "
            "changes; set zero_adv_skip=False"
        )
    if recipe.zero_adv_skip and SURROGATES.get(recipe.surrogate).per_micro_batch:
        raise ValueError(
            f"zero_adv_skip=True with surrogate={recipe.surrogate!r}: its token statistics are "
            "over every row of the micro-batch, so skipping rows would change its gradient"
        )
    if recipe.kl_ratio_correction and not (recipe.needs_reference and not recipe.kl_in_reward):
        raise ValueError(
            "kl_ratio_correction=True weighs a KL in the loss by the ratio; it needs kl set, "
            "kl_coef > 0 and kl_in_reward=False"
        )


def _check_entropy(recipe: RecipeChoices) -> None:
    """Adaptive entropy settings can take effect; DPPO's anchor is a valid one and is not
    corrected twice."""
    adaptive = ("entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")
    defaults = {f.name: f.default for f in fields(RecipeChoices)}
    if recipe.entropy_target is None:
        moved = [
            f"{n}={getattr(recipe, n)!r}" for n in adaptive if getattr(recipe, n) != defaults[n]
        ]
        if moved:
            raise ValueError(
                f"{', '.join(moved)} steer the adaptive entropy coefficient, which is off "
                "(entropy_target=None); set entropy_target (e.g. 0.2) or remove them"
            )
    elif not recipe.entropy_coef_min <= recipe.entropy_coef <= recipe.entropy_coef_max:
        raise ValueError(
            f"entropy_coef={recipe.entropy_coef!r} is the adaptive coefficient's start and "
            f"must lie in [entropy_coef_min, entropy_coef_max] = [{recipe.entropy_coef_min!r}, "
            f"{recipe.entropy_coef_max!r}]"
        )
    elif recipe.entropy_coef_max == 0.0:
        raise ValueError(
            f"entropy_target={recipe.entropy_target!r} with entropy_coef_max=0 can never "
            "apply a bonus; raise entropy_coef_max (TRL's default: 1.0)"
        )
    if recipe.dppo_anchor not in ("old", "sampler"):
        raise ValueError(f"dppo_anchor must be 'old' or 'sampler', got {recipe.dppo_anchor!r}")
    if recipe.ratio_anchor == "sampler" and recipe.correction[0] is not None:
        raise ValueError(
            f"dppo_anchor='sampler' already weighs by π/π_sampler; a rollout correction "
            f"({recipe.correction[0]}) would weigh by π_old/π_sampler once more: remove it "
            "or set dppo_anchor='old'"
        )


def _check_sampling(recipe: RecipeChoices) -> None:
    """Dynamic sampling keys on a known column and refills a non-negative number of times."""
    if recipe.dynamic_sampling_key not in SAMPLING_KEYS:
        raise ValueError(
            f"dynamic_sampling_key must be one of {', '.join(SAMPLING_KEYS)}, got "
            f"{recipe.dynamic_sampling_key!r}"
        )
    if recipe.max_refill_rounds < 0:
        raise ValueError(f"max_refill_rounds must be ≥ 0, got {recipe.max_refill_rounds}")
