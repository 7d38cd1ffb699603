"""The named recipes of docs/algorithms.md §8: each a frozen dataclass of independent choices.

This is the only place where a method's name means anything: the loop and the loss read
the fields, never the name. Every field can be overridden (`get_recipe("dapo",
clip_high=0.3)`); `describe` explains each field for `rlvr recipes` and the docs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields

# Importing the modules that define the built-in choices registers them.
from rlvr.algo import (  # noqa: F401
    aggregation,
    covariance,
    gae,
    ratios,
    regularizers,
    selection,
    surrogates,
    teacher,
)
from rlvr.algo.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    SURROGATES,
    Params,
    Registry,
)
from rlvr.algo.rollout_correction import REJECT_STATISTICS, ROLLOUT_CORRECTIONS
from rlvr.algo.selection import SAMPLING_KEYS
from rlvr.checks import check_field_types


def _doc(text: str, default: object) -> object:
    return field(default=default, metadata={"doc": text})


def _names(registry: Registry) -> str:
    return ", ".join(registry.names()) + ", or module:function"


@dataclass(frozen=True)
class Recipe:
    """A policy-optimization method as a combination of design choices (docs/algorithms.md)."""

    name: str = _doc("recipe name (a label; nothing branches on it)", "custom")
    source: str = _doc("paper the defaults come from", "")
    advantage: str = _doc(f"advantage estimator: {_names(ADVANTAGES)}", "group_norm")
    gamma: float = _doc("discount γ for GAE / returns", 1.0)
    lam: float = _doc("GAE λ (gae)", 0.95)
    vapo_alpha: float = _doc("α of VAPO's length-adaptive λ = 1 − 1/(α·|y|)", 0.05)
    ratio: str = _doc(f"importance ratio: {_names(RATIOS)}", "token")
    surrogate: str = _doc(f"surrogate loss: {_names(SURROGATES)}", "clip")
    clip_low: float = _doc("ratio lower bound is 1 − clip_low (1.0: no lower bound)", 0.2)
    clip_high: float = _doc("ratio upper bound is 1 + clip_high", 0.2)
    dual_clip_c: float = _doc("dual-clip bound c for negative advantages (dual_clip)", 3.0)
    tis_cap: float | None = _doc(
        "truncated IS cap C on π_old/π_sampler (the older spelling of rollout_correction "
        "token_tis, or geometric_tis under a sequence ratio, with rc_upper C); None: off",
        None,
    )
    rollout_correction: str | None = _doc(
        f"weight on π_old/π_sampler (docs/19-rollout-correction.md): {_names(ROLLOUT_CORRECTIONS)}"
        "; None: off",
        None,
    )
    rc_lower: float | None = _doc(
        "lower bound of the correction's band on the weight; None: none (TRL's default)", None
    )
    rc_upper: float | None = _doc("upper bound C of the correction's band; None: none", 2.0)
    rc_reject: str | None = _doc(
        f"also reject tokens/responses whose divergence exceeds rc_reject_max (verl's "
        f"rollout_rs): {', '.join(REJECT_STATISTICS)}; None: off",
        None,
    )
    rc_reject_max: float | None = _doc("threshold of rc_reject", None)
    offpolicy_mask_delta: float | None = _doc(
        "DeepSeek-V3.2 off-policy sequence mask: drop Â < 0 responses whose mean "
        "log π_sampler − log π_θ exceeds δ; None: off",
        None,
    )
    aggregation: str = _doc(f"loss aggregation: {_names(AGGREGATIONS)}", "seq_mean_token_mean")
    kl: str | None = _doc(f"KL estimator to the reference: {_names(KL_ESTIMATORS)}; None", None)
    kl_coef: float = _doc("KL coefficient β", 0.0)
    kl_in_reward: bool = _doc("KL enters the token rewards instead of the loss", False)
    entropy_coef: float = _doc(
        "entropy bonus coefficient c_H (with entropy_target: its starting value c_0)", 0.0
    )
    entropy_target: float | None = _doc(
        "adaptive entropy (Skywork-OR1; TRL use_adaptive_entropy): target H of the mean "
        "per-token entropy; the bonus acts only while the last step's entropy is ≤ H and "
        "c_H moves by entropy_coef_delta toward holding it; None: the static entropy_coef",
        None,
    )
    entropy_coef_delta: float = _doc("step δ of the adaptive c_H (entropy_target)", 0.005)
    entropy_coef_min: float = _doc("lower bound of the adaptive c_H (entropy_target)", 0.0)
    entropy_coef_max: float = _doc("upper bound of the adaptive c_H (entropy_target)", 1.0)
    value_clip: float | None = _doc("value clipping range around V_old; None: off", 0.2)
    value_pretrain_steps: int = _doc("critic-only steps before policy updates (VAPO)", 0)
    nll_coef: float = _doc("weight μ of the NLL loss on correct responses (VAPO)", 0.0)
    dynamic_sampling: bool = _doc("drop groups of uniform correctness and refill (DAPO)", False)
    dynamic_sampling_key: str = _doc(
        "what dynamic sampling keys on: 'correct' (the verifier, as DAPO) or 'reward' (the "
        "reward optimised, before length shaping: for a user's reward function)",
        "correct",
    )
    max_refill_rounds: int = _doc("extra sampling rounds allowed to refill the batch", 3)
    overlong_penalty: bool = _doc("DAPO soft overlong punishment added to the reward", False)
    overlong_cache: int = _doc("L_c: length of the soft punishment ramp, in tokens", 4)
    overlong_filter: bool = _doc("truncated responses get mask 0", False)
    zero_adv_skip: bool = _doc("skip forward/backward of all-zero-advantage responses", False)
    zero_variance_filter: bool = _doc(
        "drop zero-reward-variance groups from batch and normalizer", False
    )
    retire_threshold: float | None = _doc("retire prompts whose pass rate reaches this", None)
    fp32_head: bool = _doc("LM-head logits in FP32 in sampler and trainer", False)
    whiten_advantages: bool = _doc(
        "whiten the policy's Â over the batch's valid tokens after the estimator (value "
        "targets are computed before); on for ppo, as verl and OpenRLHF do",
        False,
    )
    teacher_kl_coef: float = _doc(
        "β of the teacher advantage A_t = −β·(log π_S − log π_T) on policy tokens "
        "(on-policy distillation; needs `teacher` in the config); 0: no teacher",
        0.0,
    )
    teacher_weight: float = _doc(
        "λ in Â = Â_outcome + λ·A_teacher (with advantage 'none': the teacher alone)", 1.0
    )
    sapo_tau_pos: float = _doc("SAPO gate temperature τ where Â > 0 (sapo)", 1.0)
    sapo_tau_neg: float = _doc("SAPO gate temperature τ where Â ≤ 0 (sapo)", 1.05)
    cov_ratio: float = _doc(
        "fraction of valid tokens selected by covariance (clip_cov, kl_cov)", 2e-4
    )
    clip_cov_lb: float = _doc("Clip-Cov candidates have lb < Cov < ub: the lb (clip_cov)", 1.0)
    clip_cov_ub: float = _doc("Clip-Cov candidates have lb < Cov < ub: the ub (clip_cov)", 5.0)
    kl_cov_coef: float = _doc("coefficient of |logπ − logπ_old| on KL-Cov's tokens (kl_cov)", 1.0)
    is_cap: float = _doc("cap C of DPPO's detached IS weight min(ρ, C) (dppo_tv)", 20.0)
    dppo_anchor: str = _doc(
        "what DPPO's mask and IS weight measure π against (dppo_tv): 'sampler', the rollout "
        "engine's log-probs (the paper, TRL), or 'old', π_old (the trainer's recomputation)",
        "sampler",
    )
    top_entropy_quantile: float = _doc(
        "ρ: only the top-ρ fraction of valid tokens by entropy keep a policy gradient (the "
        "80/20 rule: 0.2); 1.0: every token",
        1.0,
    )
    kl_ratio_correction: bool = _doc(
        "multiply the KL in the loss by the ratio π/π_old (TRL's use_bias_correction_kl)", False
    )

    def __post_init__(self) -> None:
        check_field_types(self)
        # Each lookup raises an error naming the field, the value and the registered names.
        advantage = ADVANTAGES.get(self.advantage)
        RATIOS.get(self.ratio)
        SURROGATES.get(self.surrogate)
        AGGREGATIONS.get(self.aggregation)
        if self.kl is not None:
            KL_ESTIMATORS.get(self.kl)
        if not 0.0 <= self.clip_low <= 1.0:
            raise ValueError(
                f"clip_low must be in [0, 1] (bound 1 − clip_low), got {self.clip_low}"
            )
        if self.clip_high < 0.0:
            raise ValueError(f"clip_high must be ≥ 0, got {self.clip_high}")
        if self.kl_in_reward and not advantage.token_rewards:
            token = [e.name for e in ADVANTAGES if e.token_rewards]
            raise ValueError(
                f"kl_in_reward=True needs a token-reward advantage "
                f"({', '.join(sorted(token))}), got advantage={self.advantage!r}"
            )
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be ≥ 0, got {self.kl_coef}")
        if self.kl_coef and self.kl is None:
            raise ValueError(
                f"kl_coef={self.kl_coef} needs kl set to one of {_names(KL_ESTIMATORS)}"
            )
        if self.overlong_cache < 1:
            raise ValueError(f"overlong_cache must be ≥ 1, got {self.overlong_cache}")
        if self.retire_threshold is not None and not 0.0 < self.retire_threshold <= 1.0:
            raise ValueError(f"retire_threshold must be in (0, 1], got {self.retire_threshold}")
        _check_ranges(self)
        _check_teacher(self)
        _check_correction(self)
        _check_surrogate_fields(self)
        _check_entropy(self)
        if self.dynamic_sampling_key not in SAMPLING_KEYS:
            raise ValueError(
                f"dynamic_sampling_key must be one of {', '.join(SAMPLING_KEYS)}, got "
                f"{self.dynamic_sampling_key!r}"
            )
        if self.max_refill_rounds < 0:
            raise ValueError(f"max_refill_rounds must be ≥ 0, got {self.max_refill_rounds}")

    @property
    def needs_critic(self) -> bool:
        return bool(ADVANTAGES.get(self.advantage).needs_critic)

    @property
    def params(self) -> Params:
        """The scalars every advantage estimator and surrogate receives."""
        return Params(
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            dual_clip_c=self.dual_clip_c,
            gamma=self.gamma,
            lam=self.lam,
            vapo_alpha=self.vapo_alpha,
            kl_coef=self.kl_coef if self.kl_in_reward else 0.0,
            sapo_tau_pos=self.sapo_tau_pos,
            sapo_tau_neg=self.sapo_tau_neg,
            cov_ratio=self.cov_ratio,
            clip_cov_lb=self.clip_cov_lb,
            clip_cov_ub=self.clip_cov_ub,
            kl_cov_coef=self.kl_cov_coef,
            is_cap=self.is_cap,
        )

    @property
    def needs_reference(self) -> bool:
        return self.kl is not None and self.kl_coef > 0

    @property
    def correction(self) -> tuple[str | None, float | None, float | None]:
        """(rollout_correction, lower, upper) in effect; `tis_cap` C is the older spelling
        of token_tis (geometric_tis under a sequence-level ratio) with band (−∞, C]."""
        if self.tis_cap is not None:
            level = "geometric" if RATIOS.get(self.ratio).sequence_level else "token"
            return f"{level}_tis", None, self.tis_cap
        return self.rollout_correction, self.rc_lower, self.rc_upper

    @property
    def ratio_anchor(self) -> str:
        """What the ratio's denominator is: 'old' (π_old) or 'sampler' (the rollout engine's
        log-probs: DPPO as the paper and TRL measure it)."""
        return self.dppo_anchor if self.surrogate == "dppo_tv" else "old"


def _check_ranges(recipe: Recipe) -> None:
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
    }
    for name, ok in checks.items():
        if not ok:
            raise ValueError(f"{name} must be {valid[name]}, got {getattr(recipe, name)!r}")


def _check_correction(recipe: Recipe) -> None:
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


def _check_teacher(recipe: Recipe) -> None:
    """Teacher fields that cannot take effect without a teacher term are rejected."""
    if recipe.teacher_kl_coef:
        return
    if recipe.advantage == teacher.NO_OUTCOME:
        raise ValueError(
            f"advantage={teacher.NO_OUTCOME!r} with teacher_kl_coef=0 gives every token a zero "
            f"advantage, so nothing trains; set teacher_kl_coef > 0 (a teacher's term) or "
            f"choose an outcome advantage ({', '.join(ADVANTAGES.names()[:4])}, ...)"
        )
    if recipe.teacher_weight != 1.0:
        raise ValueError(
            f"teacher_weight={recipe.teacher_weight!r} weighs the teacher's term, which "
            f"teacher_kl_coef=0 turns off; set teacher_kl_coef > 0 or remove teacher_weight"
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


def _check_surrogate_fields(recipe: Recipe) -> None:
    """A surrogate's own field moved off its default under another built-in surrogate, or
    a KL correction without a KL in the loss, is an error: it would silently do nothing."""
    defaults = {f.name: f.default for f in fields(Recipe)}
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
            "kl_ratio_correction=True weighs a KL in the loss by π/π_old; it needs kl set, "
            "kl_coef > 0 and kl_in_reward=False"
        )


def _check_entropy(recipe: Recipe) -> None:
    """Adaptive entropy settings can take effect; DPPO's anchor is a valid one and is not
    corrected twice."""
    adaptive = ("entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")
    defaults = {f.name: f.default for f in fields(Recipe)}
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


_SAPO = "Gao 2025, SAPO (arXiv 2511.20347)"
_GMPO = "Zhao 2025, GMPO (arXiv 2507.20673)"
_COV = "Cui 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv 2505.22617)"
_GRPO = "Shao 2024, DeepSeekMath (arXiv 2402.03300)"
_OPD = "Agarwal 2024, GKD (arXiv 2306.13649); Thinking Machines 2025, On-Policy Distillation"
_OPSD = "Zhao 2026, OPSD (arXiv 2601.18734): the frozen student as teacher, seeing the solution"
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
            advantage=teacher.NO_OUTCOME,
            surrogate="reinforce",
            aggregation="token_mean",
            teacher_kl_coef=1.0,
        ),
        Recipe(
            "opsd",
            _OPSD,
            advantage=teacher.NO_OUTCOME,
            surrogate="reinforce",
            aggregation="token_mean",
            teacher_kl_coef=1.0,
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
