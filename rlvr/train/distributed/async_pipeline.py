"""Asynchronous training: Ray rollout actors sample with the newest weights they received
while the learner trains, with a bound `max_lag` on how stale a rollout may be.

    learner: … consume round → train step k → publish weights v=k+1 (object store) …
    actors:  sample round with the newest published weights v, return (rollout, v)

The lag of a round is the learner's policy version when it is consumed minus the version it
was sampled with; a round with lag > `max_lag` is dropped (counted, its tokens wasted). The
learner's π_old is its own policy, so the recipe's rollout correction (`rollout_correction`,
docs/19-rollout-correction.md) corrects the sampler/learner mismatch that the lag causes; the
mismatch is logged by the loss, as in every run (`rollout/mismatch_*`).

`max_lag = 0` is the synchronous run by design: a round is requested only when the learner
needs it, with the learner's current weights and the learner's own sampling generator, whose
state comes back with the round, so the RNG stream and every number are those of
`Trainer`. With `max_lag ≥ 1` up to min(actors, max_lag) rounds are in flight (a deeper
queue would only produce rounds that arrive too stale); round r samples with its own
generator seeded from (seed, r).

A dead actor (crash, OOM, `ray.kill`): its round goes to a live actor and the run continues
on the survivors; when none is left the step fails with `RolloutActorsLost`.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.train.collect import Collected
from rlvr.train.config import TrainConfig
from rlvr.train.distributed.data_parallel import DataParallel
from rlvr.train.distributed.ranks import data_parallel_trainer
from rlvr.train.loop import Trainer
from rlvr.train.records.rollout_record import Rollout

ROUND_SEED_OFFSET = 4_000_037


class RolloutActorsLost(RuntimeError):
    """Every rollout actor died; the run cannot sample."""


@dataclass
class _Round:
    future: Any
    actor: Any
    problems: list[Any]
    generator_state: torch.Tensor
    version: int


@dataclass
class LagBook:
    """What one training step consumed and dropped, by lag."""

    max_lag: int
    used: list[int] = field(default_factory=list)
    dropped_rounds: int = 0
    dropped_tokens: float = 0.0

    def metrics(self) -> dict[str, float]:
        out = {f"async/lag_{k}_rounds": float(self.used.count(k)) for k in range(self.max_lag + 1)}
        out["async/lag_mean"] = sum(self.used) / max(len(self.used), 1)
        out["async/lag_max"] = float(max(self.used, default=0))
        out["async/dropped_rounds"] = float(self.dropped_rounds)
        out["async/dropped_tokens"] = self.dropped_tokens
        return out


class RolloutPipeline:
    """Rollout actors, the published weights, and the rounds in flight."""

    def __init__(self, trainer: Trainer, num_actors: int, max_lag: int) -> None:
        import ray

        from rlvr.train.distributed.ray_actors import RolloutWorker

        if num_actors < 1:
            raise ValueError(f"rollout_actors must be ≥ 1 for the async pipeline, got {num_actors}")
        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:  # RAY_ADDRESS (or `ray start` on this node) joins a cluster
            ray.init(include_dashboard=False)
        self.trainer = trainer
        self.max_lag = max_lag
        # The actors import what the config names (reward functions, environments, tools)
        # from this process's sys.path, as the verifier helper does (rlvr.verify.timeout).
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        worker = ray.remote(num_cpus=1)(RolloutWorker).options(
            runtime_env={"env_vars": {"PYTHONPATH": path}}
        )
        threads = torch.get_num_threads()
        self.actors = [worker.remote(trainer.cfg, threads) for _ in range(num_actors)]
        self.pids = ray.get([a.pid.remote() for a in self.actors])
        self.version = 0
        self.rounds_dispatched = 0
        self.in_flight: deque[_Round] = deque()
        self.book = LagBook(max_lag)
        self.publish()

    def publish(self) -> None:
        """Put the learner's weights in the object store as the newest policy version."""
        state = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}
        self.weights = self.ray.put(state)

    def advance(self) -> None:
        """After a training step: the learner's policy is one version newer."""
        self.version += 1
        self.publish()

    def _generator_state(self) -> torch.Tensor:
        if self.max_lag == 0:  # the synchronous stream, continued by the actor
            return self.trainer.generator.get_state()
        seed = self.trainer.cfg.seed + ROUND_SEED_OFFSET + self.rounds_dispatched
        return torch.Generator().manual_seed(seed).get_state()

    def _dispatch(self, actor: Any, problems=None, generator_state=None) -> None:
        if problems is None:
            problems = self.trainer.pool.next(self.trainer.cfg.prompts_per_step)
            generator_state = self._generator_state()
            self.rounds_dispatched += 1
        future = actor.sample.remote(problems, generator_state, self.version, [self.weights])
        self.in_flight.append(_Round(future, actor, problems, generator_state, self.version))

    def _idle_actors(self) -> list[Any]:
        busy = {id(r.actor) for r in self.in_flight}
        return [a for a in self.actors if id(a) not in busy]

    def next_round(self, offset: int) -> Rollout:
        """The oldest round within the lag bound, its groups renumbered from `offset`."""
        while True:
            if not self.in_flight:
                self._dispatch(self._live_actor())
            current = self.in_flight.popleft()
            try:
                rollout, state, version, stats = self.ray.get(current.future)
            except self.ray.exceptions.RayActorError:
                self._lose(current)
                continue
            if stats is not None:  # reward/fn/* are logged here, where the step is
                self.trainer.task.reward_model.absorb(stats)
            if self.max_lag == 0:
                self.trainer.generator.set_state(state)
            else:
                # Keep actors busy, but no more rounds queued than `max_lag`: the k-th
                # round in line is consumed about k versions later, beyond would be dropped.
                for actor in self._idle_actors()[: max(0, self.max_lag - len(self.in_flight))]:
                    self._dispatch(actor)
            lag = self.version - version
            if lag > self.max_lag:
                self.book.dropped_rounds += 1
                self.book.dropped_tokens += float(rollout.loss_mask.sum())
                continue
            self.book.used.append(lag)
            rollout.group_ids = rollout.group_ids + offset
            return rollout

    def _live_actor(self) -> Any:
        if not self.actors:
            raise RolloutActorsLost(
                "every rollout actor died; see the Ray logs (ray.util.state / /tmp/ray)"
            )
        return self._idle_actors()[0] if self._idle_actors() else self.actors[0]

    def _lose(self, failed: _Round) -> None:
        """Drop a dead actor and give its round (same prompts, same generator) to another;
        the round keeps its place at the head of the line."""
        self.actors = [a for a in self.actors if a is not failed.actor]
        actor = self._live_actor()
        future = actor.sample.remote(
            failed.problems, failed.generator_state, self.version, [self.weights]
        )
        self.in_flight.appendleft(
            _Round(future, actor, failed.problems, failed.generator_state, self.version)
        )

    def take_book(self) -> LagBook:
        book, self.book = self.book, LagBook(self.max_lag)
        return book

    def close(self) -> None:
        """Kill every actor (their processes exit); safe to call twice."""
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors = []
        self.in_flight.clear()
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()


class AsyncTrainer(Trainer):
    """`Trainer` whose rollouts come from Ray actors (`rollout_actors`, `max_lag`)."""

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        if self.sync_probe is not None:  # self.engine is the learner's own: nothing to probe
            warnings.warn(
                "sync_probe is not run with rollout_actors yet (the actors sample from their "
                "own copies); set sync_probe: false to silence this",
                stacklevel=2,
            )
            self.sync_probe = None
        self.pipeline = RolloutPipeline(self, cfg.rollout_actors, cfg.max_lag)

    def _rounds(self) -> Callable[[int], Rollout]:
        return self.pipeline.next_round

    def _collect(self) -> Collected:
        started = time.perf_counter()
        collected = super()._collect()
        book = self.pipeline.take_book()
        collected.extra.update(book.metrics())
        collected.dropped_tokens += book.dropped_tokens  # generated, never trained: on the books
        collected.extra["async/policy_version"] = float(self.pipeline.version)
        collected.extra["time/rollout_wait_s"] = time.perf_counter() - started
        return collected

    def train_step(self) -> dict[str, float]:
        metrics = super().train_step()
        self.pipeline.advance()
        return metrics

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["async"] = {"rounds_dispatched": self.pipeline.rounds_dispatched}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the restored weights become the published version `step`. Rounds that
        were in flight at the checkpoint are lost (lag ≥ 1 resumes are not bit-exact; lag 0
        has none in flight and is)."""
        super().load_state_dict(state)
        self.pipeline.rounds_dispatched = state.get("async", {}).get("rounds_dispatched", 0)
        self.pipeline.in_flight.clear()
        self.pipeline.version = self.step
        self.pipeline.publish()

    def close(self) -> None:
        self.pipeline.close()


def make_trainer(cfg: TrainConfig) -> Trainer:
    """`AsyncTrainer` when `rollout_actors ≥ 1`; under torchrun (WORLD_SIZE > 1) a
    `DataParallelTrainer` (`ShardedTrainer` with parallel: fsdp); else the in-process
    `Trainer`."""
    data_parallel = DataParallel.from_env()
    if data_parallel is not None:
        if cfg.rollout_actors:
            raise ValueError(
                f"rollout_actors={cfg.rollout_actors} under torchrun: the asynchronous "
                f"pipeline and data parallelism do not combine yet; use one of them"
            )
        return data_parallel_trainer(cfg, data_parallel)
    if cfg.parallel == "fsdp":
        raise ValueError(
            "parallel='fsdp' shards the policy over torchrun ranks, but this is one process "
            "(WORLD_SIZE unset or 1): launch with torchrun --nproc_per_node=N (N ≥ 2), or "
            "remove parallel (default 'ddp')"
        )
    if cfg.rollout_actors:
        return AsyncTrainer(cfg)
    if cfg.max_lag:
        raise ValueError(
            f"max_lag={cfg.max_lag} needs rollout_actors ≥ 1 (the in-process run has lag 0)"
        )
    return Trainer(cfg)
