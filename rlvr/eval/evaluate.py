"""Evaluate a policy on held-out problems with a fixed sampling seed.

Every evaluation of a run uses the same seed, so two eval points differ only by the policy.
Per-item results are kept for paired comparisons between recipes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.eval.tool_metrics import episode_values, item_means, summarise_tools
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import Problem, Task

# top_p this small keeps only the most likely token: greedy decoding through the same engine.
GREEDY_TOP_P = 1e-9


@dataclass
class EvalResult:
    metrics: dict[str, float]
    item_correct: list[float]  # per problem: fraction of its samples that were correct
    item_greedy: list[float]  # per problem: 1.0 if the greedy answer was correct


def _run(engine, task, problems, params, seed) -> tuple[list[float], ...]:
    """Per sample, in prompt order: correct, formatted, length, and tool-use values (empty
    for one-turn tasks)."""
    generator = torch.Generator().manual_seed(seed)
    correct, formatted, lengths = [], [], []
    gen = generate_for(engine, task, problems, params, generator)
    for i, text in zip(gen.prompt_index.tolist(), gen.texts, strict=True):
        verdict = task.verify(problems[i], text)
        correct.append(float(verdict.correct))
        formatted.append(float(verdict.formatted))
    lengths = gen.response_lengths.float().tolist()
    tools = [episode_values(e) for e in gen.episodes] if gen.episodes else []
    return correct, formatted, lengths, tools


def evaluate_policy(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int = 256,
    top_p: float = 1.0,
    progress: Callable[[int], None] | None = None,
) -> EvalResult:
    """avg@k accuracy at `temperature` and `top_p` (the training sampler's settings),
    pass@k, greedy accuracy, format rate, length. `progress(n)` hears each batch of `n`
    problems done."""
    start = time.perf_counter()
    sampled = SamplingParams(samples, temperature, top_p, max_new_tokens)
    greedy = SamplingParams(1, 1.0, GREEDY_TOP_P, max_new_tokens)
    correct, formatted, lengths, greedy_correct, tools = [], [], [], [], []
    step = max(1, batch_size // samples)
    for at in range(0, len(problems), step):
        chunk = problems[at : at + step]
        c, f, n, t = _run(engine, task, chunk, sampled, seed + at)
        correct += c
        formatted += f
        lengths += n
        tools += t
        greedy_correct += _run(engine, task, chunk, greedy, seed + at)[0]
        if progress is not None:
            progress(len(chunk))
    per_item = [
        sum(correct[i * samples : (i + 1) * samples]) / samples for i in range(len(problems))
    ]
    passed = [float(x > 0) for x in per_item]
    count = max(len(problems), 1)
    metrics = {
        "eval/accuracy": sum(per_item) / count,
        f"eval/pass@{samples}": sum(passed) / count,
        "eval/greedy_accuracy": sum(greedy_correct) / count,
        "eval/format_rate": sum(formatted) / max(len(formatted), 1),
        "eval/response_length": sum(lengths) / max(len(lengths), 1),
        "time/eval_s": time.perf_counter() - start,
        # multi-turn: tool use of the sampled episodes, per item with CIs
        **summarise_tools(
            [item_means(tools[i * samples : (i + 1) * samples]) for i in range(len(problems))]
            if tools
            else []
        ),
    }
    return EvalResult(metrics, per_item, greedy_correct)
