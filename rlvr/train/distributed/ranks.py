"""What each torchrun rank runs: rank 0 runs `rlvr train` with a data-parallel trainer,
the other ranks `follow` it (docs/distributed.md).

`parallel: ddp` replicates the policy (`rlvr.train.distributed.ddp`); `parallel: fsdp` shards
it (`rlvr.train.distributed.sharded`, which imports torch.distributed.fsdp, so only when chosen).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from rlvr.train.config import TrainConfig
from rlvr.train.distributed.data_parallel import DataParallel
from rlvr.train.distributed.ddp import DataParallelTrainer, FollowerStop


def is_follower() -> bool:
    """A torchrun rank other than 0."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) > 0


def data_parallel_trainer(cfg: TrainConfig, data_parallel: DataParallel) -> DataParallelTrainer:
    """This rank's trainer: `cfg.parallel` 'ddp' replicates the policy, 'fsdp' shards it."""
    if cfg.parallel == "fsdp":
        from rlvr.train.distributed.sharded import (
            ShardedTrainer,  # torch.distributed.fsdp only if used
        )

        return ShardedTrainer(cfg, replace(data_parallel, sharded=True))
    return DataParallelTrainer(cfg, data_parallel)


def follow(cfg: TrainConfig) -> dict[str, Any]:
    """A follower rank's whole run: update on rank 0's batches until rank 0 ends."""
    data_parallel = DataParallel.from_env()
    trainer = data_parallel_trainer(cfg, data_parallel)
    try:
        while True:
            trainer.train_step()
            trainer.step += 1
    except FollowerStop:
        pass
    return {"status": "follower", "rank": data_parallel.rank, "steps": trainer.step}
