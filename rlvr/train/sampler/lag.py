"""A sampler that lags the learner by a fixed number of policy versions, in one process.

Asynchronous RL samples with weights some updates older than the learner's (verl's
one-step off-policy mode, AReaL's bounded staleness, rlvr's Ray pipeline with `max_lag`).
`sampler_lag: k` reproduces that staleness deterministically and without Ray: the engine
samples from a copy of the policy that, after the update of step s, holds the weights of
step s − k (the initial weights while s < k). The learner recomputes π_old with its current
weights, so the lag shows in `rollout/mismatch_*` and a rollout correction
(docs/19-rollout-correction.md) acts on it, as it would on an async sampler's rollouts.

The copy keeps k + 1 versions of the parameters (k of them in the checkpoint, so a resumed
run samples as the uninterrupted one): for the embedded model a few MB; for a large model,
k copies of its weights on its device.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from rlvr.models.precision import low_precision_copy
from rlvr.train.sampler.precision import AutocastEngine, OwnCopyEngine

Snapshot = dict[str, torch.Tensor]


def _snapshot(model: torch.nn.Module) -> Snapshot:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def check_sampler_lag(cfg: Any) -> None:
    """A lag needs the in-process hf engine's own copy; elsewhere it could not act."""
    if cfg.sampler_lag and (
        cfg.rollout_engine != "hf" or cfg.rollout_actors or cfg.parallel == "fsdp"
    ):
        raise ValueError(
            f"sampler_lag={cfg.sampler_lag} lags the in-process hf engine's own copy of the "
            f"policy; it cannot act with rollout_engine={cfg.rollout_engine!r}, "
            f"rollout_actors={cfg.rollout_actors} or parallel={cfg.parallel!r} (the Ray "
            f"pipeline lags by itself: max_lag)"
        )


def lagged_engine(
    make: Callable[[torch.nn.Module], Any],
    policy: torch.nn.Module,
    precision: str,
    sampler_precision: str,
    lag: int,
) -> Any:
    """The engine `make(module)` builds over a copy of `policy` `lag` updates behind: a bf16
    copy for `sampler_precision` bf16, else a float32 one sampled under the trainer's
    autocast (as `rlvr.train.sampler.precision.sampling_engine` samples the policy itself)."""
    dtype = torch.bfloat16 if sampler_precision == "bf16" else torch.float32
    twin = low_precision_copy(policy, dtype)
    engine = LaggedEngine(make(twin), policy, twin, lag)
    same = sampler_precision == "same" and precision != "fp32"
    return AutocastEngine(engine, precision, policy) if same else engine


class LaggedEngine(OwnCopyEngine):
    """An engine over `twin`, a frozen copy of `policy` that `sync_weights` keeps `lag`
    versions behind it (its KV session and every other call: `OwnCopyEngine`'s)."""

    def __init__(self, engine: Any, policy: torch.nn.Module, twin: torch.nn.Module, lag: int):
        if lag < 1:
            raise ValueError(f"sampler_lag must be ≥ 1 for a lagged engine, got {lag}")
        super().__init__(engine, policy, twin)
        self.lag = lag
        self.versions: deque[Snapshot] = deque([_snapshot(policy)])
        """The last lag + 1 versions of the policy, oldest first: the copy holds the first."""

    @torch.no_grad()
    def sync_weights(self) -> None:
        """The policy was updated: remember its weights; the copy takes those of `lag`
        updates ago (the initial weights until that many updates have been made)."""
        self.versions.append(_snapshot(self.policy))
        while len(self.versions) > self.lag + 1:
            self.versions.popleft()
        oldest = self.versions[0]
        for name, p in self.sampler_model.named_parameters():
            p.copy_(oldest[name])
        self.engine.sync_weights()

    @property
    def version_lag(self) -> int:
        """Policy versions between the copy and the policy (lag once warmed up)."""
        return len(self.versions) - 1

    def state_dict(self) -> dict[str, Any]:
        """The versions a resumed run needs besides the policy's own weights (the newest,
        which the checkpoint holds): restore with `load_state_dict`, then `sync_weights`."""
        return {"lag": self.lag, "versions": list(self.versions)[:-1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["lag"] != self.lag:
            raise ValueError(
                f"the checkpoint's sampler_lag is {state['lag']}, this run's {self.lag}: "
                f"sampler_lag cannot change on resume"
            )
        self.versions = deque(state["versions"])


def find_lagged(engine: Any) -> LaggedEngine | None:
    """The `LaggedEngine` inside `engine`'s wrappers (each holding the next as `.engine`)."""
    for _ in range(8):
        if isinstance(engine, LaggedEngine):
            return engine
        engine = vars(engine).get("engine") if hasattr(engine, "__dict__") else None
    return None
