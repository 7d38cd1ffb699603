"""One registry per design choice: the names a recipe may hold, and what each one runs.

Every entry is registered where its function is defined, with a decorator such as
`@register_surrogate("clip")`; a recipe's valid values, its error messages and the
composition layer (`objective.py`, `loss.py`) all read the registries, so adding a choice
is one function in one file. A recipe may also name a function of the user's own module
as `module:function` (e.g. `surrogate="mypkg.losses:my_clip"`): it is imported and
registered on first use, so it runs through the loop, `rlvr audit` and `rlvr compare` as
any built-in choice does (docs/extending.md).

Uniform signatures (docs/algorithms.md §1–6):
- advantage:   fn(batch: AdvantageBatch, params: Params) -> (Â (N, T), value targets or None),
               or with a third item, a dict of metrics the step logs (`turn/` of AgentOPSD)
- ratio:       fn(logprobs, old_logprobs, response_mask) -> ρ (N, T)
- surrogate:   fn(ratio, advantages, logprobs, params: Params) -> SurrogateOut; one
               registered with needs_mask=True also gets response_mask=(N, T) by keyword
               (sequence_mean=True: mean_mask=, needs_anchor=True: anchor_logprobs=)
- aggregation: fn(response_mask, group_ids, max_new_tokens) -> per-response weight (N,)
- kl:          fn(logprobs, ref_logprobs) -> k (N, T)
- selection:   fn(correct, rewards, group_ids) -> keep (N,) bool; the name is the recipe's
               boolean field that switches it on
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Params:
    """The recipe's scalars that reach every advantage estimator and surrogate the same way."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float = 3.0
    gamma: float = 1.0
    lam: float = 0.95
    vapo_alpha: float = 0.05
    kl_coef: float = 0.0  # β of a KL that enters the token rewards (0 when it is in the loss)
    # Second-generation surrogates (issue 29; docs/algorithms.md §3).
    sapo_tau_pos: float = 1.0  # SAPO gate temperature for Â > 0
    sapo_tau_neg: float = 1.05  # SAPO gate temperature for Â ≤ 0
    cov_ratio: float = 0.0002  # Clip-Cov / KL-Cov: fraction of tokens selected by covariance
    clip_cov_lb: float = 1.0  # Clip-Cov: covariance band (lb, ub) of the candidates
    clip_cov_ub: float = 5.0
    kl_cov_coef: float = 1.0  # KL-Cov: coefficient of |Δ| on the selected tokens
    is_cap: float = 20.0  # DPPO: cap C of the detached IS weight min(ρ, C)
    # AgentOPSD's turn credit (rlvr/algo/advantages/turn_credit.py).
    turn_decay: float = 0.95  # γ of the evidence sum c_k = γ·c_{k−1} + e_k
    turn_lambda: float = 0.5  # λ of the multiplier (1 − λ) + λ·w_k
    turn_weight_bound: float = 0.2  # δ: w_k ∈ [1 − δ, 1 + δ]


class AdvantageBatch(NamedTuple):
    """What an advantage estimator sees: the kept rows of one rollout batch."""

    rewards: Any  # (N,) shaped rewards
    group_ids: Any  # (N,)
    response_mask: Any  # (N, T)
    kl: Any = None  # (N, T) per-token KL to the reference when it enters the reward
    values: Any = None  # (N, T) critic values, for estimators with needs_critic
    old_logprobs: Any = None  # (N, T) log π_old, for estimators with needs_teacher
    teacher_logprobs: Any = None  # (N, T) a teacher's log π_T of the same tokens
    turn_ids: Any = None  # (N, T) long: the agent turn k ≥ 1 of each token, 0 on none


@dataclass(frozen=True)
class Entry:
    """One registered choice: its name, its function and its properties (e.g. needs_critic)."""

    name: str
    fn: Callable[..., Any]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, key: str) -> Any:
        attrs = object.__getattribute__(self, "attrs")
        if key in attrs:
            return attrs[key]
        raise AttributeError(key)


class Registry:
    """Name → `Entry` for one design choice; `defaults` are the properties an entry has
    unless it says otherwise (a user's `module:function` gets exactly these)."""

    def __init__(self, kind: str, **defaults: Any) -> None:
        self.kind = kind
        self.defaults = defaults
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, fn: Callable | None = None, **attrs: Any) -> Callable:
        """Register `fn` as `name`, directly or as a decorator; returns `fn` unchanged."""

        def add(fn: Callable) -> Callable:
            unknown = set(attrs) - set(self.defaults)
            if unknown:
                raise ValueError(
                    f"{self.kind} {name!r}: unknown properties {sorted(unknown)}; "
                    f"valid: {', '.join(self.defaults) or 'none'}"
                )
            self._entries[name] = Entry(name, fn, {**self.defaults, **attrs})
            return fn

        return add if fn is None else add(fn)

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order (built-ins first)."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self._entries.values())

    def get(self, name: str) -> Entry:
        """The entry of `name`, importing a `module:function` reference on first use."""
        if name not in self._entries and isinstance(name, str) and ":" in name:
            self._resolve(name)
        if name not in self._entries:
            raise ValueError(
                f"{self.kind}={name!r} is not valid; choose one of: {', '.join(self.names())}, "
                "or a module:function reference (docs/extending.md)"
            )
        return self._entries[name]

    def __getitem__(self, name: str) -> Callable:
        return self.get(name).fn

    def _resolve(self, reference: str) -> None:
        module_name, _, attr = reference.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except Exception as err:  # the user's module may fail in any way while importing
            raise ValueError(
                f"{self.kind}={reference!r}: cannot import it ({type(err).__name__}: {err})"
            ) from None
        if not callable(fn):
            raise ValueError(f"{self.kind}={reference!r} is not a function")
        # A function its module registered with a decorator keeps its properties.
        known = next((e for e in self._entries.values() if e.fn is fn), None)
        attrs = known.attrs if known else self.defaults
        self._entries[reference] = Entry(reference, fn, dict(attrs))


ADVANTAGES = Registry(
    "advantage", needs_critic=False, token_rewards=False, group_baseline=False, needs_teacher=False
)
RATIOS = Registry("ratio", sequence_level=False)
SURROGATES = Registry(
    "surrogate",
    needs_mask=False,
    per_micro_batch=False,
    bounds="ratio",
    sequence_mean=False,
    needs_anchor=False,
)
AGGREGATIONS = Registry("aggregation")
KL_ESTIMATORS = Registry("kl")
SELECTIONS = Registry("selection")


def register_advantage(name: str, **attrs: Any) -> Callable:
    """Decorator: an advantage estimator, fn(batch: AdvantageBatch, params: Params).

    Properties: needs_critic (it reads batch.values), token_rewards (it can take a KL
    penalty in its token rewards, i.e. admits kl_in_reward), group_baseline (its baseline
    is the prompt's own group, so a group of one gets Â = 0), needs_teacher (it reads
    batch.teacher_logprobs against batch.old_logprobs, and batch.turn_ids: a config
    `teacher` is then required)."""
    return ADVANTAGES.register(name, **attrs)


def register_ratio(name: str, **attrs: Any) -> Callable:
    """Decorator: an importance ratio; sequence_level=True if it is one value per response."""
    return RATIOS.register(name, **attrs)


def register_surrogate(name: str, **attrs: Any) -> Callable:
    """Decorator: a per-token surrogate loss, fn(ratio, advantages, logprobs, params).

    Properties: needs_mask (it reads the response mask, passed as `response_mask=`, e.g.
    for a sequence mean); per_micro_batch (it reads statistics of all the rows it is given,
    so its gradient depends on the micro-batch split and no row may be skipped); bounds
    (what clip_low/clip_high bound, for `rlvr recipes`: "ratio" ρ ∈ [1 − low, 1 + high],
    "log_ratio" Δ ∈ [−low, high], "probability" π − π_old ∈ [−low, high], or "none");
    sequence_mean (its loss is one value per response, from a mean over the tokens it is
    given as `mean_mask=`: the entropy selection enters that mean instead of scaling the
    loss, and a token-level rollout-correction weight is folded into one weight per
    response by its geometric mean); needs_anchor (it also gets the ratio's denominator,
    the log-probs ρ is measured against, unclamped, as `anchor_logprobs=`)."""
    return SURROGATES.register(name, **attrs)


def register_aggregation(name: str) -> Callable:
    """Decorator: an aggregation mode, fn(response_mask, group_ids, max_new_tokens) -> (N,)."""
    return AGGREGATIONS.register(name)


def register_kl(name: str) -> Callable:
    """Decorator: a KL estimator, fn(logprobs, ref_logprobs) -> (N, T)."""
    return KL_ESTIMATORS.register(name)


def register_selection(field_name: str) -> Callable:
    """Decorator: a batch filter switched on by the recipe's boolean `field_name`."""
    return SELECTIONS.register(field_name)


def per_response(fn: Callable[[Any, Any], Any]) -> Callable[[AdvantageBatch, Params], Any]:
    """The uniform estimator of fn(rewards, group_ids) -> Â (N,): Â broadcast over each
    response's valid tokens, no value targets."""

    def estimate(batch: AdvantageBatch, params: Params) -> tuple[Any, None]:
        return fn(batch.rewards, batch.group_ids)[:, None] * batch.response_mask, None

    estimate.__doc__ = fn.__doc__
    return estimate
