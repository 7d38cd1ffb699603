"""Collecting one step's rollout batch, with DAPO dynamic sampling and its cost recorded.

Dynamic sampling (arXiv 2503.14476, §3.2): groups whose raw correctness is uniform carry no
signal; they are dropped and replacement prompts are sampled until the batch holds
`prompts_per_step` informative groups or `max_refill_rounds` extra rounds were spent. What
was kept is trained on (a partial batch if need be; nothing kept skips the update). Every
generated token is on the books: generated, trained and discarded (`rlvr.train.step_metrics`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rlvr.algo.recipes import Recipe
from rlvr.algo.selection import informative_groups
from rlvr.rewards import reward_metrics, task_rewards
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.tasks import Problem, Task
from rlvr.train.prompt_pool import PromptPool
from rlvr.train.rollout_record import Rollout, from_generation


@dataclass
class Collected:
    """One step's sampling: everything generated, what dynamic sampling kept, its cost."""

    generated: Rollout  # every response sampled this step, refills included
    rollout: Rollout | None  # the kept batch; None when every group was filtered out
    refills: int  # extra sampling rounds spent
    rollout_s: float  # seconds spent sampling and verifying
    first_round_s: float  # of which the first round
    pool: dict[str, float]  # prompt-pool and reward-function metrics


def sample_groups(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    params: SamplingParams,
    generator: torch.Generator,
    group_offset: int,
) -> Rollout:
    """Generate `params.group_size` responses per problem and verify each one."""
    gen = engine.generate([p.prompt for p in problems], params, generator)
    verdicts = [
        task.verify(problems[i], text)
        for i, text in zip(gen.prompt_index.tolist(), gen.texts, strict=True)
    ]
    correct = [v.correct for v in verdicts]
    answered = [problems[i] for i in gen.prompt_index.tolist()]
    return from_generation(
        gen,
        [p.uid for p in problems],
        group_offset,
        correct,
        [v.formatted for v in verdicts],
        task_rewards(task, answered, gen.texts, verdicts),
    )


def _record_passes(pool: PromptPool, rollout: Rollout) -> int:
    """Feed each group's outcome to the pool; returns how many prompts retired."""
    retired = 0
    for gid in torch.unique(rollout.group_ids).tolist():
        rows = (rollout.group_ids == gid).nonzero().squeeze(-1)
        uid = rollout.problem_uids[int(rows[0])]
        retired += pool.record(uid, int(rollout.correct[rows].sum()), len(rows))
    return retired


def collect_rollouts(
    engine: RolloutEngine,
    task: Task,
    pool: PromptPool,
    recipe: Recipe,
    params: SamplingParams,
    prompts_per_step: int,
    generator: torch.Generator,
) -> Collected:
    """One step's batch: sample, verify, (dynamic sampling: filter and refill)."""
    start = time.perf_counter()
    every: list[Rollout] = []
    kept: list[Rollout] = []
    retired, first_round_s = 0, 0.0
    while True:
        offset = len(every) * prompts_per_step
        batch = sample_groups(engine, task, pool.next(prompts_per_step), params, generator, offset)
        every.append(batch)
        first_round_s = first_round_s or time.perf_counter() - start
        retired += _record_passes(pool, batch)
        if recipe.dynamic_sampling:
            batch = batch.select(
                informative_groups(batch.correct, batch.group_ids).nonzero().squeeze(-1)
            )
        kept += [batch] if len(batch) else []
        if not recipe.dynamic_sampling or _group_count(kept) >= prompts_per_step:
            break
        if len(every) - 1 >= recipe.max_refill_rounds:
            break
    rollout = _first_groups(Rollout.concat(kept), prompts_per_step) if kept else None
    pool_metrics = {
        "rollout/retired_prompts": float(retired),
        "rollout/pool_size": float(pool.active_size),
        **reward_metrics(task),
    }
    elapsed = time.perf_counter() - start
    return Collected(
        Rollout.concat(every), rollout, len(every) - 1, elapsed, first_round_s, pool_metrics
    )


def _group_count(batches: list[Rollout]) -> int:
    return sum(int(torch.unique(b.group_ids).numel()) for b in batches)


def _first_groups(rollout: Rollout, count: int) -> Rollout:
    """Keep the first `count` prompt groups (extra refilled groups are discarded)."""
    groups = torch.unique_consecutive(rollout.group_ids)[:count]
    return rollout.select(torch.isin(rollout.group_ids, groups).nonzero().squeeze(-1))
