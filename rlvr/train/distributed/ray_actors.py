"""A rollout actor for Ray: a copy of the policy that samples and verifies prompt groups with
the newest weights the learner has published (rlvr/train/distributed/async_pipeline.py).

The actor builds its policy, task and engine exactly as the learner's `Trainer` does (same
config, same warm start), then only ever receives weights. Ray is imported by the caller.
"""

from __future__ import annotations

from typing import Any

import torch


class RolloutWorker:
    """Plain class; `ray.remote(RolloutWorker)` makes it an actor."""

    def __init__(self, cfg: Any, threads: int) -> None:
        torch.set_num_threads(threads)  # the learner's: same kernels, same samples
        from rlvr.train.loop import Trainer

        self.trainer = Trainer(cfg)
        self.version = -1

    def pid(self) -> int:
        import os

        return os.getpid()

    def sample(
        self,
        problems: list[Any],
        generator_state: torch.Tensor,
        version: int,
        weights: list[Any],
    ) -> tuple[Any, torch.Tensor, int, Any]:
        """Sample and verify one round of groups (group ids from 0) with the weights of
        policy `version` (`weights`: [ObjectRef of a state dict], fetched only when new).
        Returns (rollout, the generator's state afterwards, the version used, the reward
        functions' statistics or None)."""
        if version != self.version:
            import ray

            self.trainer.model.load_state_dict(ray.get(weights[0]))
            self.trainer.engine.sync_weights()
            self.version = version
        from rlvr.train.collect import sample_groups

        generator = torch.Generator()
        generator.set_state(generator_state)
        rollout = sample_groups(
            self.trainer.engine, self.trainer.task, problems, self.trainer.params, generator, 0
        )
        model = getattr(self.trainer.task, "reward_model", None)
        stats = None if model is None else model.take_stats()  # the trainer logs them
        return rollout, generator.get_state(), version, stats
