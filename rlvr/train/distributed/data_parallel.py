"""The data-parallel group of one process: which prompt groups are its share, and the
collectives the update needs (gradient sum, statistics merge, broadcasts). The trainer
that uses it is `rlvr.train.distributed.ddp`; `update.py` needs only this, so it imports no
trainer."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rlvr.algo import StepStats

REPLICATED = ("train/grad_norm",)  # the norm of the summed gradient, alike on every rank


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the data-parallel group. `sharded`: the policy is sharded
    with FSDP2 (rlvr/train/distributed/fsdp.py), which sums the gradients itself in every backward."""

    rank: int
    world_size: int
    sharded: bool = False

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

    def idle_micro_batches(self, group_ids: torch.Tensor, rows: torch.Tensor, size: int) -> int:
        """Forward/backward passes this rank must add, computing nothing, so that every rank
        runs as many as the busiest one: under FSDP each pass is a collective (weights
        gathered, gradients reduce-scattered). `rows` (N,) bool: the step's computed rows,
        which every rank knows, so each rank's share is counted without communication."""
        if not self.sharded:
            return 0
        counts = [
            -(-int(DataParallel(r, self.world_size).shard(group_ids, rows).sum()) // size)
            for r in range(self.world_size)
        ]
        return max(counts) - counts[self.rank]

    def all_reduce_grads(self, model: torch.nn.Module) -> None:
        """Σ over ranks of every trainable gradient; a rank with no rows contributes zeros.
        Sharded: nothing to do, FSDP reduce-scattered them with SUM in each backward."""
        if self.sharded:
            return
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
