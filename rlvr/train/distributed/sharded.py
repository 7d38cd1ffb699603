"""Data parallelism with the policy sharded by FSDP2 (`parallel: fsdp`, docs/distributed.md).

The protocol is `DataParallelTrainer`'s (rank 0 samples and broadcasts the batch, every rank
updates on its share of the prompt groups with the global loss weights); what changes is
where the weights live:

- The policy and π_ref are sharded over the ranks (`rlvr.train.distributed.fsdp.shard_policy`); the
  policy optimizer holds only this rank's shards. Every forward is a collective, so every
  rank runs every π_old/π_ref forward of the batch and as many update passes as the
  busiest rank (`DataParallel.idle_micro_batches`).
- Generation is not sharded: rank 0 samples and evaluates with an unsharded copy of the
  policy (`rollout_policy`, with the fused decode path), whose weights are gathered from
  the shards after every update, as a vLLM engine's would be. Sampling is thus exactly the
  single-process run's; the cost is one full copy of the weights on rank 0's device.
- Checkpoints are written by rank 0 as a single process writes them: the weights from the
  rollout copy, the policy optimizer's state gathered from the shards (rank 0 tells the
  waiting followers to join the gather). A resumed rank 0 scatters its weights and
  optimizer state to the shards with the first batch. The critic (PPO, VAPO) is not
  sharded: it is replicated as under DDP.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rlvr.train.config import TrainConfig
from rlvr.train.distributed.data_parallel import DataParallel
from rlvr.train.distributed.ddp import GATHER, DataParallelTrainer
from rlvr.train.distributed.fsdp import (
    copy_weights,
    fsdp_mesh,
    gather_optimizer,
    gather_weights,
    mesh_device,
    scatter_optimizer,
    scatter_weights,
    shard_policy,
)
from rlvr.train.loop import _stateful


class ShardedTrainer(DataParallelTrainer):
    """`DataParallelTrainer` over an FSDP2-sharded policy (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, data_parallel: DataParallel) -> None:
        mesh = fsdp_mesh(data_parallel.world_size)  # first: on GPUs it picks this rank's
        super().__init__(cfg, data_parallel)
        main = data_parallel.is_main
        self.rollout_policy = None
        if main:
            self.rollout_policy = copy.deepcopy(self.model).to(mesh_device(mesh))
            self.rollout_policy.requires_grad_(False)
            self.engine = self._make_engine(self.rollout_policy)
        reference = self.reference.state_dict() if main and self.reference is not None else None
        # Sharded, then rank 0's weights scattered: one starting point, whatever the init.
        shard_policy(self.model, mesh)
        scatter_weights(self.model, self.rollout_policy.state_dict() if main else None)
        if self.reference is not None:
            shard_policy(self.reference, mesh)
            scatter_weights(self.reference, reference)
        self.optimizer = self._policy_optimizer()  # rebuilt over the shards
        self._pending_optimizer: dict[str, Any] | None = None  # rank 0, resumed
        self._in_step = False

    def _share_initial_weights(self) -> None:
        """Done once sharded (`__init__`): a whole-weights broadcast would need them on the
        collective's device (NCCL: the GPU), where they may not fit."""

    @property
    def full_policy(self) -> torch.nn.Module:
        return self.model if self.rollout_policy is None else self.rollout_policy

    def train_step(self) -> dict[str, float]:
        self._in_step = True
        metrics = super().train_step()
        if not metrics["train/update_skipped"]:
            full = gather_weights(self.model)
            if self.rollout_policy is not None:
                copy_weights(self.rollout_policy, full)
                self.engine.sync_weights()
        self._in_step = False
        return metrics

    def _training_state(self) -> dict[str, Any]:
        """Rank 0's state for the followers: the replicated parts, and whether a resumed
        policy must be scattered to the shards."""
        return {
            "critic": None if self.critic is None else self.critic.state_dict(),
            "optimizers": {k: v.state_dict() for k, v in self._replicated().items()},
            "minibatch_rng": self.minibatch_generator.get_state(),  # as under DDP
            "entropy_control": self.entropy_control,  # as under DDP
            "resumed": self._pending_optimizer is not None,
        }

    def _receive_training_state(self, state: dict[str, Any]) -> None:
        main = self.data_parallel.is_main
        if state["resumed"]:
            scatter_weights(self.model, self.rollout_policy.state_dict() if main else None)
            scatter_optimizer(self.model, self.optimizer, self._pending_optimizer)
            self._pending_optimizer = None
        if main:
            return
        self.minibatch_generator.set_state(state["minibatch_rng"])
        self.entropy_control = state["entropy_control"]
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        for key, value in state["optimizers"].items():
            _stateful(self)[key].load_state_dict(value)

    def _optimizer_states(self) -> dict[str, Any]:
        """As a single process saves them; the policy optimizer's state gathered from the
        shards (on rank 0, which first calls the waiting followers to the gather)."""
        states = {k: v.state_dict() for k, v in self._replicated().items()}
        key = self._policy_optimizer_key()
        if self.data_parallel.is_main and self._pending_optimizer is not None:
            return {**states, key: self._pending_optimizer}  # resumed, not yet scattered
        if self.data_parallel.is_main:
            if self._in_step:
                raise RuntimeError(
                    "the sharded optimizer state cannot be gathered inside a failed step "
                    "(the other ranks are in its collectives); the last good checkpoint stands"
                )
            self.data_parallel.broadcast(GATHER)
        return {**states, key: gather_optimizer(self.model, self.optimizer)}

    def _load_optimizer_states(self, states: dict[str, Any]) -> None:
        """Rank 0 resuming: the policy optimizer's state waits for the first batch, when
        every rank takes part in scattering it."""
        states = dict(states)
        key = self._policy_optimizer_key()
        if key not in states:
            raise ValueError(f"checkpoint optimizer/scheduler states lack {key!r}")
        self._pending_optimizer = states.pop(key)
        replicated = self._replicated()
        missing = sorted(set(replicated) ^ set(states))
        if missing:
            raise ValueError(f"checkpoint optimizer/scheduler states do not match: {missing}")
        for name, value in states.items():
            replicated[name].load_state_dict(value)

    def _policy_optimizer_key(self) -> str:
        return next(k for k, v in _stateful(self).items() if v is self.optimizer)

    def _replicated(self) -> dict[str, Any]:
        """Optimizers and schedulers of unsharded modules (the critic's)."""
        return {k: v for k, v in _stateful(self).items() if v is not self.optimizer}
