"""The named losses of `TrainingClient.forward_backward`, each rlvr's own math.

Every loss is a SUM over tokens and datums, with no normalisation, as in the remote
training APIs: to train with one of rlvr's aggregations, fold its weights into the
advantages (Â_{i,t}·w_{i,t}, `rlvr.algo.policy.aggregation.aggregation_weights`); every
surrogate here is positively homogeneous in Â, so that is exactly rlvr's loss. A sum is
also what the PyTRIO SDK's `forward_backward_custom` assumes: it sends the custom loss as
cross_entropy with weights −∂loss/∂logπ, whose gradient is the custom loss's only if
cross_entropy is Σ w·(−log π). The SDK's `gradient_accumulation` totals are therefore
not used as divisors; `token_count` (the positions the SDK counts as active) is reported
so that `loss_mean = loss_sum / token_count` (docs/service.md, "Losses").

A target of -100 is no position of any loss (nor of `token_count`).

| loss_fn               | loss_fn_inputs                           | rlvr function         |
|-----------------------|------------------------------------------|-----------------------|
| cross_entropy         | target_tokens, weights                   | aggregate(−logπ, w)   |
| importance_sampling   | target_tokens, logprobs, advantages      | surrogate `reinforce` |
| ppo                   | target_tokens, logprobs, advantages      | surrogate `clip`      |
| cispo                 | target_tokens, logprobs, advantages      | surrogate `cispo`     |
| gspo                  | the same and response_mask               | ratio `sequence`, `clip` |
| any rlvr surrogate    | target_tokens, logprobs, advantages      | that surrogate        |

`logprobs` are the sampler's, so ρ = π/π_sampler (rlvr's `token_ratio`). `ppo` and
`cispo` take the ratio bounds as the remote API does (`clip_low_threshold` 0.8,
`clip_high_threshold` 1.2); rlvr surrogates by name take rlvr's ε (`clip_low`,
`clip_high`, `dual_clip_c`, as in a recipe).

A datum carries no response mask, and a token ratio needs none (prompt positions have
Â = 0). GSPO's sequence ratio s_i = exp(mean over y_i of (log π − log π_sampler)) does:
`gspo` takes it as `response_mask` (1 on positions whose target is a sampled token, 0 on
the prompt and on an episode's observations; the Tinker SDK's `sequence_ratio_mask` is
the same input), which also bounds the sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

import rlvr.algo.policy.ratios  # noqa: F401  (registers the ratios)
from rlvr.algo.policy.aggregation import aggregate
from rlvr.algo.registry import RATIOS, SURROGATES, Params
from rlvr.service.datums import Batch, is_finite_number

POLICY_INPUTS = ("target_tokens", "logprobs", "advantages")
THRESHOLDS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
RLVR_PARAMS = ("clip_low", "clip_high", "dual_clip_c")


@dataclass(frozen=True)
class LossSpec:
    """A named loss: the inputs it reads, its config keys with defaults, and its rlvr
    surrogate (None: cross-entropy)."""

    inputs: tuple[str, ...]
    config: dict[str, float]
    surrogate: str | None
    ratio: str = "token"


API_LOSSES = {
    "cross_entropy": LossSpec(("target_tokens", "weights"), {}, None),
    "importance_sampling": LossSpec(POLICY_INPUTS, {}, "reinforce"),
    "ppo": LossSpec(POLICY_INPUTS, THRESHOLDS, "clip"),
    "cispo": LossSpec(POLICY_INPUTS, THRESHOLDS, "cispo"),
    # GSPO's ε (3e-4, 4e-4: rlvr's `gspo` recipe) as ratio bounds
    "gspo": LossSpec(
        (*POLICY_INPUTS, "response_mask"),
        {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4},
        "clip",
        "sequence",
    ),
}


# The remote services' own losses, whose formulas their SDKs do not publish (Tinker's
# stable_reinforce; PyTRIO's and Tinker's dro).
SERVICE_ONLY = ("stable_reinforce", "dro")


def loss_spec(loss_fn: str) -> LossSpec:
    """The spec of a remote-API loss or of an rlvr surrogate by name (or module:function)."""
    if loss_fn in API_LOSSES:
        return API_LOSSES[loss_fn]
    if loss_fn in SERVICE_ONLY:
        raise ValueError(
            f"loss_fn={loss_fn!r} is computed on the remote service and its formula is not "
            f"published, so rlvr.service does not have it; choose one of: {', '.join(API_LOSSES)}"
        )
    defaults = {f.name: f.default for f in fields(Params) if f.name in RLVR_PARAMS}
    if isinstance(loss_fn, str) and (loss_fn in SURROGATES or ":" in loss_fn):
        try:
            SURROGATES.get(loss_fn)
        except ValueError as err:
            raise ValueError(f"loss_fn={loss_fn!r}: {err}") from None
        return LossSpec(POLICY_INPUTS, defaults, loss_fn)
    raise ValueError(
        f"loss_fn={loss_fn!r} is not valid; choose one of: {', '.join(API_LOSSES)}, "
        f"or an rlvr surrogate: {', '.join(SURROGATES.names())} (or module:function)"
    )


def surrogate_params(loss_fn: str, config: dict[str, Any] | None) -> Params:
    """The rlvr `Params` of `loss_fn` under `config`; unknown keys and bad values refused."""
    spec = loss_spec(loss_fn)
    config = dict(config or {})
    unknown = sorted(set(config) - set(spec.config))
    if unknown:
        raise ValueError(
            f"loss_fn_config key {unknown[0]!r} is not valid for loss_fn={loss_fn!r}; "
            f"valid: {', '.join(spec.config) or 'none'}"
        )
    for key, value in config.items():
        if not is_finite_number(value):
            raise ValueError(f"loss_fn_config[{key!r}]={value!r} must be a finite number")
    values = {**spec.config, **config}
    if loss_fn in ("ppo", "cispo", "gspo"):
        low, high = values["clip_low_threshold"], values["clip_high_threshold"]
        if not 0 <= low <= 1 <= high:
            raise ValueError(
                f"loss_fn_config clip_low_threshold={low!r}, clip_high_threshold={high!r}: "
                "need 0 <= clip_low_threshold <= 1 <= clip_high_threshold (ratio bounds)"
            )
        return Params(clip_low=1.0 - low, clip_high=high - 1.0)
    return Params(**values)


def token_count(loss_fn: str, batch: Batch) -> int:
    """The positions a loss sums over, as the PyTRIO SDK counts its active tokens:
    cross_entropy, those with weight ≠ 0; any other loss, every position; never a -100
    target or padding."""
    active = batch.active
    if loss_fn == "cross_entropy":
        active = active * (batch.inputs["weights"] != 0).float()
    return int(active.sum())


def loss_metrics(loss_sum: float, count: int) -> dict[str, float]:
    """A loss's metrics under both SDKs' names (`ForwardBackwardOutput`): Tinker's
    `loss:sum`, PyTRIO's `loss_sum`, `token_count` and `loss_mean` = sum / count."""
    mean = loss_sum / count if count > 0 else 0.0
    return {"loss:sum": loss_sum, "loss_sum": loss_sum, "loss_mean": mean, "token_count": count}


def compute_loss(
    loss_fn: str, logprobs: torch.Tensor, batch: Batch, params: Params
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss to differentiate, the loss's reported value), both Σ over every active
    position (`batch.active`: not padding, not a -100 target).

    `logprobs` (B, N) are log π(target_tokens) with gradient, 0 on padding. The two agree
    except for importance_sampling, whose reported value is the remote API's −Σ ρ·Â while
    the backward runs on rlvr's `reinforce` −Σ sg(ρ)·Â·logπ: same gradient, ρ·Â·∇logπ.
    """
    mask = batch.active.to(logprobs.device)
    inputs = {k: v.to(logprobs.device) for k, v in batch.inputs.items()}
    if loss_fn == "cross_entropy":
        loss = aggregate(-logprobs, inputs["weights"] * mask)
        return loss, loss.detach()
    spec = loss_spec(loss_fn)
    if "response_mask" in inputs:
        mask = mask * inputs["response_mask"]  # 0/1, checked by `pack`
    advantages = inputs["advantages"] * mask  # (B, N)
    ratio = RATIOS.get(spec.ratio).fn(logprobs, inputs["logprobs"], mask)  # (B, N) π/π_sampler
    surrogate: Callable = SURROGATES.get(spec.surrogate).fn
    loss = aggregate(surrogate(ratio, advantages, logprobs, params).loss, mask)
    if loss_fn == "importance_sampling":
        return loss, aggregate(-ratio.detach() * advantages, mask)
    return loss, loss.detach()
