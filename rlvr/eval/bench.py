"""`rlvr eval --k K`: sample K completions per item of any model on any task and report
avg@K, pass@k (unbiased, for k = 1, 2, 4, … ≤ K), maj@K, format rate and mean completion
tokens, each with a 95 % CI over items, and write one JSONL line per item so two models
can be compared item by item."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from rlvr.eval.passk import majority_correct, pass_at_k, wilson_interval
from rlvr.eval.significance import t_interval
from rlvr.eval.tool_metrics import episode_values, item_means, summarise_tools
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import Problem, Task


@dataclass(frozen=True)
class KSettings:
    k: int
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    batch_size: int = 64
    """Prompts per generate call (each with k samples)."""


def score_items(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    settings: KSettings,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per problem: its k samples with verdicts, and the per-item metrics;
    `progress(n)` hears each batch of `n` problems done."""
    params = SamplingParams(
        settings.k, settings.temperature, settings.top_p, settings.max_new_tokens
    )
    generator = torch.Generator().manual_seed(settings.seed)
    uids = item_uids(problems)
    records = []
    for at in range(0, len(problems), settings.batch_size):
        chunk = problems[at : at + settings.batch_size]
        gen = generate_for(engine, task, chunk, params, generator)
        lengths = gen.response_lengths.tolist()
        samples: list[list[dict[str, Any]]] = [[] for _ in chunk]
        for row, i in enumerate(gen.prompt_index.tolist()):
            verdict = task.verify(chunk[i], gen.texts[row])
            samples[i].append(
                {
                    "text": gen.texts[row],
                    "correct": verdict.correct,
                    "formatted": verdict.formatted,
                    "extracted": verdict.extracted,
                    "reason": verdict.reason,
                    "tokens": int(lengths[row]),
                    "truncated": bool(gen.truncated[row]),
                    **(episode_values(gen.episodes[row]) if gen.episodes else {}),
                }
            )
        records += [
            _item_record(task, p, s, settings.k) for p, s in zip(chunk, samples, strict=True)
        ]
        if progress is not None:
            progress(len(chunk))
    for record, uid in zip(records, uids, strict=True):
        record["uid"] = uid
    return records


ID_COLUMNS = ("id", "uid", "unique_id", "problem_id", "question_id")
"""Columns that name a dataset row, tried in this order (MATH-500's is unique_id)."""


def item_uids(problems: list[Problem]) -> list[str]:
    """The data's own name of every item: the first of `ID_COLUMNS` that every row holds,
    with no value repeated, as text. Else (synthetic tasks, data without ids) the task's
    uid, which counts positions in the split (``gsm8k/eval/3``)."""
    rows = [getattr(p, "columns", None) or {} for p in problems]
    present = [c for c in ID_COLUMNS if any(_has_value(row.get(c)) for row in rows)]
    for column in present:
        ids = [str(row.get(column)) for row in rows]
        if all(_has_value(row.get(column)) for row in rows) and len(set(ids)) == len(ids):
            return ids
    if present:
        warnings.warn(
            f"eval items are named by position, not by the data's {present[0]!r} column: "
            f"it is missing or repeated in some rows",
            stacklevel=2,
        )
    return [p.uid for p in problems]


def _has_value(value: Any) -> bool:
    return value is not None and value == value and str(value).strip() != ""  # NaN ≠ NaN


def _item_record(
    task: Task, problem: Problem, samples: list[dict[str, Any]], k: int
) -> dict[str, Any]:
    """One line of the `--items` file; `rlvr compare --items` reads it (rlvr/eval/paired.py)."""
    correct = [s["correct"] for s in samples]
    same = same_answer(task, problem, samples)
    return {
        "uid": problem.uid,
        "task": task.name,
        "prompt": problem.prompt,
        "answer": problem.answer,
        "n": len(samples),
        "c": sum(correct),
        "avg": sum(correct) / len(samples),
        "maj": majority_correct([s["extracted"] for s in samples], correct, same),
        "format_rate": sum(s["formatted"] for s in samples) / len(samples),
        "mean_tokens": sum(s["tokens"] for s in samples) / len(samples),
        "samples": samples,
        **(item_means(samples) if "turns" in samples[0] else {}),
        **{f"pass@{j}": pass_at_k(len(samples), sum(correct), j) for j in pass_ks(k)},
    }


def same_answer(
    task: Task, problem: Problem, samples: list[dict[str, Any]]
) -> Callable[[int, int], bool]:
    """Whether samples i and j of `problem` gave the same answer, by the task's verifier.

    Two correct answers are the same (both equal the reference; for a task with many right
    answers, such as countdown, any right answer is the consensus); a correct and a wrong
    one never are. Two wrong formatted answers are the same when each is judged correct
    with the other's extracted answer as the reference, so ``1/2`` and ``0.5`` pool their
    votes under the math verifier. An unformatted answer matches only by its text.
    """

    def accepts(text: str, reference: str) -> bool:
        return task.verify(replace(problem, answer=reference), text).correct

    def same(i: int, j: int) -> bool:
        a, b = samples[i], samples[j]
        if a["correct"] or b["correct"]:
            return a["correct"] and b["correct"]
        if not (a["formatted"] and b["formatted"]):
            return False
        return accepts(a["text"], b["extracted"]) and accepts(b["text"], a["extracted"])

    return same


def pass_ks(k: int) -> list[int]:
    """1, 2, 4, … below k, and k itself."""
    ks = [1]
    while ks[-1] * 2 < k:
        ks.append(ks[-1] * 2)
    return ks + ([k] if k > 1 else [])


def summarise(records: list[dict[str, Any]], k: int) -> dict[str, float]:
    """Means over items with 95 % CIs: `eval/avg@k`, `eval/pass@j`, `eval/maj@k`,
    `eval/format_rate` (rates: Wilson), `eval/mean_tokens` (Student t), and with episodes
    the tool use (`rlvr.eval.tool_metrics`), each with `_ci_low` / `_ci_high`."""
    if not records:
        raise ValueError("no eval items: the split is empty (check --data, --split, --size)")
    columns = {
        f"avg@{k}": "avg",
        f"maj@{k}": "maj",
        "format_rate": "format_rate",
        "mean_tokens": "mean_tokens",
        **{f"pass@{j}": f"pass@{j}" for j in pass_ks(k)},
    }
    metrics: dict[str, float] = {"eval/items": float(len(records)), "eval/k": float(k)}
    for name, field in columns.items():
        values = [r[field] for r in records]
        interval = t_interval(values) if field == "mean_tokens" else wilson_interval(values)
        metrics[f"eval/{name}"] = interval.mean
        metrics[f"eval/{name}_ci_low"] = interval.low
        metrics[f"eval/{name}_ci_high"] = interval.high
    return {**metrics, **summarise_tools([r for r in records if "turns" in r])}


def write_items(path: str | Path, records: list[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def evaluate_k(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    settings: KSettings,
    items_path: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Score `problems` with k samples each; metrics with CIs (and the items JSONL).
    `progress(n)` hears each batch of `n` problems done."""
    started = time.perf_counter()
    records = score_items(engine, task, problems, settings, progress)
    if items_path is not None:
        write_items(items_path, records)
    return {**summarise(records, settings.k), "time/eval_s": time.perf_counter() - started}
