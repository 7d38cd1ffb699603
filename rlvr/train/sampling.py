"""Collecting one step's rollout batch, with DAPO dynamic sampling and its cost recorded.

Dynamic sampling (arXiv 2503.14476, §3.2): groups whose raw correctness is uniform carry no
signal; they are dropped and replacement prompts are sampled until the batch holds
`prompts_per_step` informative groups or `max_refill_rounds` extra rounds were spent. What
was kept is trained on (a partial batch if need be; nothing kept skips the update). Every
generated token is on the books: generated, trained and discarded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rlvr.algo.recipes import Recipe
from rlvr.algo.selection import informative_groups
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.tasks import Problem, Task
from rlvr.train.prompt_pool import PromptPool
from rlvr.train.rollout_batch import Rollout, from_generation


@dataclass
class Collected:
    rollout: Rollout | None  # None when every group was filtered out
    metrics: dict[str, float]


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
    return from_generation(
        gen,
        [p.uid for p in problems],
        group_offset,
        correct,
        [v.formatted for v in verdicts],
        [float(c) for c in correct],
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
    parts: list[Rollout] = []
    kept_groups = generated = candidates = rounds = retired = 0
    every: list[Rollout] = []
    while True:
        batch = sample_groups(
            engine, task, pool.next(prompts_per_step), params, generator, group_offset=candidates
        )
        every.append(batch)
        candidates += prompts_per_step
        generated += int(batch.loss_mask.sum())
        retired += _record_passes(pool, batch)
        if recipe.dynamic_sampling:
            batch = batch.select(
                informative_groups(batch.correct, batch.group_ids).nonzero().squeeze(-1)
            )
        if len(batch):
            parts.append(batch)
            kept_groups += int(torch.unique(batch.group_ids).numel())
        if kept_groups >= prompts_per_step or rounds >= recipe.max_refill_rounds:
            break
        if not recipe.dynamic_sampling:
            break
        rounds += 1
    rollout = _first_groups(Rollout.concat(parts), prompts_per_step) if parts else None
    trained = 0 if rollout is None else int(rollout.loss_mask.sum())
    all_rows = Rollout.concat(every)
    metrics = {
        "rollout/candidate_groups": float(candidates),
        "rollout/kept_groups": float(
            0 if rollout is None else torch.unique(rollout.group_ids).numel()
        ),
        "rollout/refill_rounds": float(rounds),
        "rollout/generated_tokens": float(generated),
        "rollout/trained_tokens": float(trained),
        "rollout/discarded_tokens": float(generated - trained),
        "rollout/generated_responses": float(len(all_rows)),
        "rollout/retired_prompts": float(retired),
        "rollout/pool_size": float(pool.active_size),
        "rollout/truncated_frac": float(all_rows.truncated.float().mean()),
        "rollout/interrupted_frac": _interrupted_frac(all_rows),
        "rollout/response_length": float(all_rows.lengths.mean()),
        "reward/mean": float(all_rows.rewards.mean()),
        "reward/accuracy": float(all_rows.correct.mean()),
        "reward/format_rate": float(all_rows.formatted.mean()),
        "time/rollout_s": time.perf_counter() - start,
    }
    return Collected(rollout, metrics)


def _interrupted_frac(rollout: Rollout) -> float:
    """Fraction of responses that reached the thinking budget and got the end phrase."""
    if rollout.forced_mask is None:
        return 0.0
    return float((rollout.forced_mask.sum(-1) > 0).float().mean())


def _first_groups(rollout: Rollout, count: int) -> Rollout:
    """Keep the first `count` prompt groups (extra refilled groups are discarded)."""
    groups = torch.unique_consecutive(rollout.group_ids)[:count]
    return rollout.select(torch.isin(rollout.group_ids, groups).nonzero().squeeze(-1))
