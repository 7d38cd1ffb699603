"""A run's precision: the trainer's (`precision`) and the sampler's (`sampler_precision`).

- `precision: bf16`: every forward of the trainer's module (the loss's log π, π_old, π_ref,
  a critic's V) runs under bf16 autocast over float32 master weights; gradients, AdamW
  state, losses and normalisers stay float32 (`rlvr.models.precision`). The recipe's
  `fp32_head` keeps the LM head's product in float32 too (ScaleRL, arXiv 2510.13786).
- `sampler_precision: same`: the engine samples with the trainer's own module in the
  trainer's precision. `bf16`: the engine samples from a bf16 copy of its own, rounded from
  the master weights at every weight sync, as vLLM holds one. Its log-probs are the
  rollout's sampler log-probs, so the loss logs the mismatch (`rollout/mismatch_*`) and a
  recipe's `rollout_correction` corrects for it.

The copy is a function of the master weights: a resumed run re-derives it at the sync
after loading them (`rlvr.train.run._restore`), so checkpoints do not hold it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from rlvr.models.precision import (
    PRECISIONS,
    autocast,
    bf16_supported,
    copy_weights,
    low_precision_copy,
    model_device,
)
from rlvr.rollout.kv_session import open_session

SAMPLER_PRECISIONS = ("same", "bf16")


def check_precision(cfg: Any, recipe: Any) -> None:
    """The precision fields name valid choices that can take effect with this policy,
    engine and recipe (no device is looked at: `check_device` does at run time)."""
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}")
    if cfg.sampler_precision not in SAMPLER_PRECISIONS:
        raise ValueError(
            f"sampler_precision must be one of {', '.join(SAMPLER_PRECISIONS)}, "
            f"got {cfg.sampler_precision!r}"
        )
    dtype = (cfg.policy or {}).get("dtype", "float32")
    if dtype != "float32" and "bf16" in (cfg.precision, cfg.sampler_precision):
        field = "precision" if cfg.precision == "bf16" else "sampler_precision"
        raise ValueError(
            f"{field}=bf16 computes in bf16 from float32 master weights, and policy.dtype="
            f"{dtype} stores the weights in {dtype} already (no master copy); use "
            f"policy.dtype: float32 with {field}: bf16, or leave {field} at its default"
        )
    if cfg.sampler_precision == "bf16" and cfg.rollout_engine != "hf":
        raise ValueError(
            f"sampler_precision=bf16 gives the in-process hf engine a bf16 copy; "
            f"rollout_engine={cfg.rollout_engine!r} holds its own copy in the dtype of "
            f"engine_options.dtype: set that instead"
        )
    low = "bf16" in (cfg.precision, cfg.sampler_precision) or dtype != "float32"
    if cfg.overrides.get("fp32_head") and not low:
        warnings.warn(
            "fp32_head=true has no effect: the policy computes in float32 already "
            "(precision=fp32, sampler_precision=same, policy.dtype float32); it matters "
            "with precision: bf16, sampler_precision: bf16 or a bf16 policy.dtype",
            stacklevel=3,
        )


def check_device(cfg: Any, device: torch.device) -> None:
    """bf16 where the device has no native bf16 products is refused: emulated, it is many
    times slower than the float32 it is meant to beat."""
    for field in ("precision", "sampler_precision"):
        if getattr(cfg, field) == "bf16" and not bf16_supported(device):
            raise ValueError(
                f"{field}=bf16, but this {device.type} has no native bf16 arithmetic (CPUs "
                f"need AVX-512 BF16 or AMX; GPUs compute capability 8.0+): bf16 would be "
                f"emulated, slower than float32; use {field}: "
                f"{'fp32' if field == 'precision' else 'same'}"
            )


def sampling_engine(
    make: Callable[[torch.nn.Module], Any],
    policy: torch.nn.Module,
    precision: str,
    sampler_precision: str,
) -> Any:
    """The rollout engine `make(module)` builds, sampling in `sampler_precision`: from a
    bf16 copy of `policy` (`OwnCopyEngine`) or from `policy` itself in the trainer's
    `precision` (`AutocastEngine` for bf16)."""
    if sampler_precision == "bf16":
        twin = low_precision_copy(policy, torch.bfloat16)
        return OwnCopyEngine(make(twin), policy, twin)
    engine = make(policy)
    return engine if precision == "fp32" else AutocastEngine(engine, precision, policy)


class OwnCopyEngine:
    """An engine over a low-precision copy of the policy: `sync_weights` rounds the
    trainer's current weights into the copy, then tells the engine."""

    def __init__(self, engine: Any, policy: torch.nn.Module, twin: torch.nn.Module) -> None:
        self.engine, self.policy, self.sampler_model = engine, policy, twin

    def sync_weights(self) -> None:
        copy_weights(self.policy, self.sampler_model)
        self.engine.sync_weights()

    def open_session(self) -> Any:
        """The multi-turn KV session of the engine over the copy (rlvr.rollout.kv_session)."""
        return open_session(self.engine)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class AutocastEngine:
    """An engine sampling with the trainer's module under the trainer's autocast, so
    that its log-probs are computed as the trainer's are."""

    def __init__(self, engine: Any, precision: str, policy: torch.nn.Module) -> None:
        self.engine, self.precision, self.policy = engine, precision, policy

    def _autocast(self):
        return autocast(self.precision, model_device(self.policy))

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            return self.engine.generate(*args, **kwargs)

    def generate_ids(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            return self.engine.generate_ids(*args, **kwargs)

    def score_ids(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            return self.engine.score_ids(*args, **kwargs)

    def open_session(self) -> Any:
        """The engine's multi-turn KV session, its calls under this autocast too."""
        session = open_session(self.engine)
        return None if session is None else _AutocastSession(session, self._autocast)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class _AutocastSession:
    """A KV session whose calls run under the trainer's autocast, as its engine's do."""

    def __init__(self, session: Any, autocast_: Callable[[], Any]) -> None:
        self.session, self._autocast = session, autocast_

    def generate_ids(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            return self.session.generate_ids(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


BF16_PROBE_TOLERANCE = 5e-2
"""The weight-sync probe's default limit when either side computes in bf16: bf16 keeps 8
bits of mantissa, so two correct computations differ by ~1e-2 in log-prob (measured in
tests/train/test_precision.py)."""


def probe_tolerance(probe: Any, cfg: Any) -> None:
    """Raise the probe's default tolerance (not a user's `sync_probe_tol`) to bf16's."""
    bf16 = "bf16" in (cfg.precision, cfg.sampler_precision)
    if probe is not None and bf16 and cfg.sync_probe_tol is None:
        probe.tolerance = max(probe.tolerance, BF16_PROBE_TOLERANCE)
