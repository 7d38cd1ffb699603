"""The fields of a recipe (docs/algorithms.md §8), each documented, and what they imply.

`RecipeChoices` holds the choices unchecked; `rlvr.algo.recipes.Recipe` is the same
dataclass checked on construction (`rlvr.algo.recipes.checks`). The field docs are what
`rlvr recipes --fields` and the docs print.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Importing the modules that define the built-in choices registers them, before the field
# docs below list the registered names; the advantages first, so that `rlvr recipes
# --fields` lists the estimators in the order they were written.
from rlvr.algo.advantages import gae  # noqa: F401
from rlvr.algo.policy import aggregation, covariance, ratios, surrogates  # noqa: F401

# isort: split
from rlvr.algo import regularizers, selection, teacher  # noqa: F401
from rlvr.algo.advantages import turn_credit  # noqa: F401
from rlvr.algo.policy.rollout_correction import REJECT_STATISTICS, ROLLOUT_CORRECTIONS
from rlvr.algo.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    SURROGATES,
    Params,
    Registry,
)


def _doc(text: str, default: object) -> object:
    return field(default=default, metadata={"doc": text})


def choice_names(registry: Registry) -> str:
    """The registry's names as a field doc or an error message lists them."""
    return ", ".join(registry.names()) + ", or module:function"


@dataclass(frozen=True)
class RecipeChoices:
    """The independent design choices of a policy-optimization method, unchecked; build a
    `Recipe` (rlvr.algo.recipes), which checks them."""

    name: str = _doc("recipe name (a label; nothing branches on it)", "custom")
    source: str = _doc("paper the defaults come from", "")
    advantage: str = _doc(f"advantage estimator: {choice_names(ADVANTAGES)}", "group_norm")
    gamma: float = _doc("discount γ for GAE / returns", 1.0)
    lam: float = _doc("GAE λ (gae)", 0.95)
    vapo_alpha: float = _doc("α of VAPO's length-adaptive λ = 1 − 1/(α·|y|)", 0.05)
    ratio: str = _doc(f"importance ratio: {choice_names(RATIOS)}", "token")
    surrogate: str = _doc(f"surrogate loss: {choice_names(SURROGATES)}", "clip")
    clip_low: float = _doc("ratio lower bound is 1 − clip_low (1.0: no lower bound)", 0.2)
    clip_high: float = _doc("ratio upper bound is 1 + clip_high", 0.2)
    dual_clip_c: float = _doc("dual-clip bound c for negative advantages (dual_clip)", 3.0)
    tis_cap: float | None = _doc(
        "truncated IS cap C on π_old/π_sampler (the older spelling of rollout_correction "
        "token_tis, or geometric_tis under a sequence ratio, with rc_upper C); None: off",
        None,
    )
    rollout_correction: str | None = _doc(
        "weight on π_old/π_sampler (docs/19-rollout-correction.md): "
        f"{choice_names(ROLLOUT_CORRECTIONS)}; None: off",
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
    aggregation: str = _doc(
        f"loss aggregation: {choice_names(AGGREGATIONS)}", "seq_mean_token_mean"
    )
    kl: str | None = _doc(
        f"KL estimator to the reference: {choice_names(KL_ESTIMATORS)}; None", None
    )
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
    turn_decay: float = _doc(
        "γ of AgentOPSD's evidence sum c_k = γ·c_{k−1} + e_k over agent turns (turn_belief)", 0.95
    )
    turn_lambda: float = _doc(
        "λ of AgentOPSD's turn multiplier (1 − λ) + λ·w_k on the GRPO advantage (turn_belief)",
        0.5,
    )
    turn_weight_bound: float = _doc(
        "δ of AgentOPSD's turn weight w_k ∈ [1 − δ, 1 + δ] (turn_belief)", 0.2
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
        "ρ: only the top-ρ fraction of valid tokens by entropy keep their policy loss (the "
        "80/20 rule: 0.2; under a sequence ratio each response's loss is weighed by its "
        "share of them, docs/algorithms.md §3); 1.0: every token",
        1.0,
    )
    kl_ratio_correction: bool = _doc(
        "multiply the KL in the loss by the ratio (TRL's use_bias_correction_kl): π/π_old per "
        "token, the sequence ratio under a sequence-level ratio (GSPO)",
        False,
    )

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
            turn_decay=self.turn_decay,
            turn_lambda=self.turn_lambda,
            turn_weight_bound=self.turn_weight_bound,
        )

    @property
    def needs_teacher(self) -> bool:
        """A teacher's log-probs are read: a teacher term (β > 0) or an advantage that
        consumes them (turn_belief)."""
        return self.teacher_kl_coef > 0 or bool(ADVANTAGES.get(self.advantage).needs_teacher)

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
