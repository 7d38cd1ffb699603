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
is the compute, the forwards and backwards of the policy update. With `parallel: fsdp` the
weights, gradients and optimizer states are sharded too (`rlvr.train.distributed.sharded`).
"""

from __future__ import annotations

from typing import Any

from rlvr.train.collect import Collected
from rlvr.train.config import TrainConfig
from rlvr.train.distributed.data_parallel import DataParallel
from rlvr.train.loop import Trainer, _stateful

STOP = "rlvr/data-parallel/stop"
GATHER = "rlvr/data-parallel/gather-optimizer"  # rank 0 saves: gather the sharded states


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
        self._share_initial_weights()
        self._state_sent = False

    def _share_initial_weights(self) -> None:
        """Rank 0's weights on every rank: one starting point, whatever each rank's init."""
        self.data_parallel.broadcast_weights(self.model)

    def _collect(self) -> Collected:
        """Rank 0's rollout batch and sampling metrics on every rank (its pool and generator
        are the single-process run's; the other ranks' stay unused)."""
        message = None
        if self.data_parallel.is_main:
            state = None if self._state_sent else self._training_state()
            message = (super()._collect(), state)
        message = self.data_parallel.broadcast(message)
        while message == GATHER:  # followers, while rank 0 saves a sharded run
            self._optimizer_states()
            message = self.data_parallel.broadcast(None)
        if message == STOP:
            raise FollowerStop
        collected, state = message
        if state is not None:
            self._receive_training_state(state)
        self._state_sent = True
        return collected

    def _receive_training_state(self, state: dict[str, Any]) -> None:
        """Every rank, with the first batch: the followers take rank 0's state."""
        if not self.data_parallel.is_main:
            self._load_training_state(state)

    def _training_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
            "optimizers": {k: v.state_dict() for k, v in _stateful(self).items()},
            # Every rank draws the same minibatch split from its own generator; a resumed
            # rank 0's is restored, the followers' must follow it.
            "minibatch_rng": self.minibatch_generator.get_state(),
            "entropy_control": self.entropy_control,  # a resumed rank 0's adaptive c_H
        }

    def _load_training_state(self, state: dict[str, Any]) -> None:
        self.minibatch_generator.set_state(state["minibatch_rng"])
        self.entropy_control = state["entropy_control"]
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
