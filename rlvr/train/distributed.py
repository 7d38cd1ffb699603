"""Data parallelism over torch.distributed: one rollout batch, its prompt groups sharded
over the ranks, gradients summed.

Design (docs/distributed.md): rank 0 samples the step's rollout batch exactly as a
single-process run does (same prompt pool, same sampling generator) and broadcasts it; every
rank runs `prepare_batch` over the *whole* batch, so advantages and the aggregation weights
come from the global counts (ALGORITHMS.md §4); within each optimizer step's rows every rank
computes the forward/backward of its own share of the prompt groups, and the gradients are
all-reduced with SUM, since the weights already carry the global normalizers
(L = Σ_ranks Σ_{i ∈ shard} Σ_t w_{i,t} ℓ_{i,t}). One rank is the single-process run.

The rollout record (token ids, masks, rewards) is small next to the model; what is sharded
is the compute, the forwards and backwards of the policy update.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rlvr.algo import StepStats
from rlvr.train.config import TrainConfig
from rlvr.train.loop import Trainer, _stateful
from rlvr.train.sampling import Collected

REPLICATED = ("train/grad_norm",)  # the norm of the summed gradient, alike on every rank


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the data-parallel group."""

    rank: int
    world_size: int

    @staticmethod
    def from_env() -> DataParallel | None:
        """The torchrun group (WORLD_SIZE > 1), initialising it (gloo on CPU, nccl on CUDA)
        if needed; None for a single process."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return None
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return DataParallel(dist.get_rank(), dist.get_world_size())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, group_ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """This rank's share of `rows` (N,) bool: whole prompt groups, dealt round-robin in
        group-id order, so kept groups that are few or uneven still spread over the ranks."""
        groups = torch.unique(group_ids[rows])
        mine = groups[self.rank :: self.world_size]
        return rows & torch.isin(group_ids, mine)

    def all_reduce_grads(self, model: torch.nn.Module) -> None:
        """Σ over ranks of every trainable gradient; a rank with no rows contributes zeros."""
        for p in model.parameters():
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def reduce_stats(self, stats: StepStats) -> StepStats:
        """The step statistics of every rank merged (sums added, ratio parts added); the
        REPLICATED sums, computed after the all-reduce, are the same on every rank."""
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, (stats.sums, stats.ratios))
        merged = StepStats()
        for sums, ratios in parts:
            local = {k: v for k, v in sums.items() if k not in REPLICATED}
            merged.merge(StepStats(local, dict(ratios)))
        merged.sums.update({k: v for k, v in stats.sums.items() if k in REPLICATED})
        return merged

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (a picklable object: the rollout batch, metrics)."""
        box = [value if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_weights(self, model: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (after rank 0 loaded a checkpoint)."""
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


STOP = "rlvr/data-parallel/stop"


class FollowerStop(Exception):
    """Rank 0's run ended (finished, stopped or failed): the follower ranks end too."""


class DataParallelTrainer(Trainer):
    """`Trainer` on one rank: rank 0 samples the batch, every rank updates on its shard.

    Rank 0 runs `rlvr train` (logs, evaluations, checkpoints, resume); the other ranks
    `follow`: each step they receive rank 0's batch, and with the first one rank 0's full
    training state (weights, optimizer states), so a resumed rank 0 brings them along.
    """

    def __init__(self, cfg: TrainConfig, data_parallel: DataParallel) -> None:
        super().__init__(cfg)
        self.data_parallel = data_parallel
        data_parallel.broadcast_weights(self.model)  # one starting point, whatever the init
        self._state_sent = False

    def _collect(self) -> Collected:
        """Rank 0's rollout batch and sampling metrics on every rank (its pool and generator
        are the single-process run's; the other ranks' stay unused)."""
        message = None
        if self.data_parallel.is_main:
            state = None if self._state_sent else self._training_state()
            message = (super()._collect(), state)
        message = self.data_parallel.broadcast(message)
        if message == STOP:
            raise FollowerStop
        collected, state = message
        if state is not None and not self.data_parallel.is_main:
            self._load_training_state(state)
        self._state_sent = True
        return collected

    def _training_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
            "optimizers": {k: v.state_dict() for k, v in _stateful(self).items()},
        }

    def _load_training_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.engine.sync_weights()
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        for key, value in state["optimizers"].items():
            _stateful(self)[key].load_state_dict(value)

    def close(self) -> None:
        """On rank 0: tell the followers the run is over (whatever ended it)."""
        if self.data_parallel.is_main:
            self.data_parallel.broadcast(STOP)
        super().close()


def is_follower() -> bool:
    """A torchrun rank other than 0."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) > 0


def follow(cfg: TrainConfig) -> dict[str, Any]:
    """A follower rank's whole run: update on rank 0's batches until rank 0 ends."""
    data_parallel = DataParallel.from_env()
    trainer = DataParallelTrainer(cfg, data_parallel)
    try:
        while True:
            trainer.train_step()
            trainer.step += 1
    except FollowerStop:
        pass
    return {"status": "follower", "rank": data_parallel.rank, "steps": trainer.step}
