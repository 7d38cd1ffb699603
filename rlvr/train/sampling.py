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
from rlvr.rewards import reward_metrics, task_rewards
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
        kept_groups = sum(int(torch.unique(b.group_ids).numel()) for b in kept)
        refills = len(every) - 1
        if not recipe.dynamic_sampling or kept_groups >= prompts_per_step:
            break
        if refills >= recipe.max_refill_rounds:
            break
    rollout = _first_groups(Rollout.concat(kept), prompts_per_step) if kept else None
    metrics = _cost_metrics(Rollout.concat(every), rollout, len(every) - 1, prompts_per_step)
    metrics.update(_time_metrics(metrics, time.perf_counter() - start, first_round_s))
    metrics["rollout/retired_prompts"] = float(retired)
    metrics["rollout/pool_size"] = float(pool.active_size)
    metrics.update(reward_metrics(task))
    return Collected(rollout, metrics)


def _time_metrics(costs: dict[str, float], rollout_s: float, first_round_s: float):
    """Rollout seconds, the part spent refilling, and the share spent on discarded samples
    (generation time is proportional to tokens)."""
    wasted = costs["rollout/discarded_tokens"] / max(costs["rollout/generated_tokens"], 1)
    return {
        "time/rollout_s": rollout_s,
        "time/refill_s": rollout_s - first_round_s,
        "time/discarded_rollout_s": rollout_s * wasted,
    }


def _cost_metrics(
    every: Rollout, kept: Rollout | None, refills: int, prompts_per_step: int
) -> dict[str, float]:
    """What the step's sampling produced, what of it is trained on, and what was wasted."""
    generated = float(every.loss_mask.sum())
    trained = 0.0 if kept is None else float(kept.loss_mask.sum())
    return {
        "rollout/candidate_groups": float((refills + 1) * prompts_per_step),
        "rollout/kept_groups": float(0 if kept is None else torch.unique(kept.group_ids).numel()),
        "rollout/refill_rounds": float(refills),
        "rollout/generated_tokens": generated,
        "rollout/trained_tokens": trained,
        "rollout/discarded_tokens": generated - trained,
        "rollout/generated_responses": float(len(every)),
        "rollout/truncated_frac": float(every.truncated.float().mean()),
        "rollout/interrupted_frac": _interrupted_frac(every),
        "rollout/response_length": float(every.lengths.mean()),
        **length_by_outcome(every.lengths, every.correct),
        "reward/mean": float(every.rewards.mean()),
        "reward/accuracy": float(every.correct.mean()),
        "reward/format_rate": float(every.formatted.mean()),
    }


def length_by_outcome(lengths: torch.Tensor, correct: torch.Tensor) -> dict[str, float]:
    """Mean length of the correct and of the incorrect responses; a key is left out when
    no response has that outcome (a mean over nothing is not 0)."""
    out = {}
    for name, rows in (("correct", correct.bool()), ("incorrect", ~correct.bool())):
        if rows.any():
            out[f"rollout/{name}_length"] = float(lengths[rows].float().mean())
    return out


def _interrupted_frac(rollout: Rollout) -> float:
    """Fraction of responses that reached the thinking budget and got the end phrase."""
    if rollout.forced_mask is None:
        return 0.0
    return float((rollout.forced_mask.sum(-1) > 0).float().mean())


def _first_groups(rollout: Rollout, count: int) -> Rollout:
    """Keep the first `count` prompt groups (extra refilled groups are discarded)."""
    groups = torch.unique_consecutive(rollout.group_ids)[:count]
    return rollout.select(torch.isin(rollout.group_ids, groups).nonzero().squeeze(-1))
