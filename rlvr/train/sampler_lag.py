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
from typing import Any

import torch

from rlvr.rollout.kv_session import open_session

Snapshot = dict[str, torch.Tensor]


def _snapshot(model: torch.nn.Module) -> Snapshot:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


class LaggedEngine:
    """An engine over `twin`, a frozen copy of `policy` that `sync_weights` keeps `lag`
    versions behind it."""

    def __init__(self, engine: Any, policy: torch.nn.Module, twin: torch.nn.Module, lag: int):
        if lag < 1:
            raise ValueError(f"sampler_lag must be ≥ 1 for a lagged engine, got {lag}")
        self.engine, self.policy, self.sampler_model, self.lag = engine, policy, twin, lag
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

    def open_session(self) -> Any:
        """The multi-turn KV session of the engine over the copy (rlvr.rollout.kv_session)."""
        return open_session(self.engine)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def find_lagged(engine: Any) -> LaggedEngine | None:
    """The `LaggedEngine` inside `engine`'s wrappers (each holding the next as `.engine`)."""
    for _ in range(8):
        if isinstance(engine, LaggedEngine):
            return engine
        engine = vars(engine).get("engine") if hasattr(engine, "__dict__") else None
    return None
