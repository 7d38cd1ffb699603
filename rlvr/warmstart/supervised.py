"""Supervised warm start of the embedded policy, so RL starts from a partial pass rate.

The tiny Qwen2 is trained with cross-entropy on each problem's ideal completion (target
tokens and EOS, never the prompt) until its *sampled* accuracy on the dev split reaches
`target_accuracy`. Stopping on accuracy rather than a step count matters: on 2-digit
addition the accuracy jumps from ~0 to 20–40 % at a seed-dependent step. The result is
cached on disk, keyed by everything that determines it. A multi-turn task whose targets
hold the environment's replies may mark them (`observation_spans(target)`, character
spans): they stay in the context but out of the loss, as in RL, where they are forced.

The result depends on the settings alone, not on the process that builds it: training
runs with one torch thread (the thread count changes the order of float reductions, and
a stochastic dev gate turns a last-bit difference into a different stopping step), and
each dev evaluation samples with a generator seeded afresh, so its score is a function
of the weights. Bitwise equality across machines with different CPU instruction sets or
torch builds is not promised.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, PreTrainedModel

from rlvr.checks import check_int
from rlvr.models.cache import cache_root, exclusive
from rlvr.models.logprobs import response_logprobs
from rlvr.models.quiet import quiet_transformers
from rlvr.models.tiny import ATTN_IMPLEMENTATION, build_tiny_policy, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.rollout.hf_engine import HFEngine
from rlvr.runlog.progress import duration
from rlvr.tasks import TASKS, Problem, Task, make_task

FORMAT_VERSION = 3
"""Bump when the training procedure or its data changes, so stale caches are not reused.
2: one torch thread, dev evaluation re-seeded per check, arithmetic mirrors deduplicated.
3: the dev check samples through the static-cache decode loop (other float rounding)."""
META_FILE = "meta.json"
TRAIN_THREADS = 1
"""torch intra-op threads while training: fixed, so the float results do not vary."""
DEV_SEED_OFFSET = 7_919
"""Dev sampling seed is `seed + DEV_SEED_OFFSET`, apart from the batch-order seed."""


def warm_start(
    task_name: str,
    task_options: dict[str, Any],
    seed: int,
    target_accuracy: float = 0.3,
    max_steps: int = 3000,
    eval_every: int = 25,
    lr: float = 1e-3,
    batch_size: int = 64,
    model_options: dict[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[PreTrainedModel, CharTokenizer, dict[str, Any]]:
    """The tiny policy trained on `task_name` until sampled dev accuracy ≥ `target_accuracy`
    (checked every `eval_every` steps) or `max_steps`; loaded from the cache when present.

    `model_options` go to `tiny_qwen2_config` (hidden, layers, ...); None: the task's
    `embedded_model` where it has one (household: a longer context), else the defaults.
    Returns the model
    (in train mode), its tokenizer and `info`: steps, dev_accuracy, reached_target,
    seconds, cache_hit, cache_path.
    """
    schedule = WarmStartSchedule(target_accuracy, max_steps, eval_every, lr, batch_size)
    if model_options is None and hasattr(TASKS.get(task_name), "embedded_model"):
        # A task whose episodes outgrow the default context names the model it needs.
        model_options = make_task(task_name, **task_options).embedded_model
    settings = _settings(task_name, task_options, seed, model_options, schedule)
    return cached(
        settings,
        cache_dir,
        "",
        _load_cached,
        lambda path: _train_and_cache(path, task_name, task_options, seed, settings, progress),
    )


def cached(settings: dict, cache_dir, prefix: str, load: Callable, train: Callable):
    """`load(path)` of the warm start that `settings` determine, cached under
    `warmstart/<prefix><hash of settings>`; else `train(path)`, which saves it there
    (`_save_atomically`). One process trains; concurrent ones (test workers, parallel
    compare cells) wait for it, then load what it saved."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    path = cache_root(cache_dir) / "warmstart" / f"{prefix}{key[:16]}"
    if (path / META_FILE).is_file():
        return load(path)
    with exclusive(path.parent.parent / "locks" / f"{path.name}.lock"):
        if (path / META_FILE).is_file():
            return load(path)
        return train(path)


def _train_and_cache(path, task_name, task_options, seed, settings, progress):
    target_accuracy = settings["target_accuracy"]
    task = make_task(task_name, **task_options)
    tokenizer = CharTokenizer()
    tokenizer.encode(task.alphabet)  # fail now, naming the character, if the task needs more
    model = build_tiny_policy(tiny_qwen2_config(**settings["model"]), seed)
    started = time.perf_counter()
    with torch_threads(TRAIN_THREADS):
        steps, accuracy = _train(model, tokenizer, task, settings, progress)
    info = {
        "steps": steps,
        "dev_accuracy": accuracy,
        "reached_target": accuracy >= target_accuracy,
        "seconds": round(time.perf_counter() - started, 2),
        "settings": settings,
    }
    _save_atomically(path, model, tokenizer, info)
    if progress:
        reached = "reached" if info["reached_target"] else "did not reach"
        print(
            f"warm start {task_name}: {reached} dev accuracy {target_accuracy:.2f} "
            f"({accuracy:.3f} after {steps} steps, {info['seconds']:.0f}s); cached at {path}",
            file=sys.stderr,
            flush=True,
        )
    return model, tokenizer, {**info, "cache_hit": False, "cache_path": str(path)}


@dataclass(frozen=True)
class WarmStartSchedule:
    """How long and how fast the warm start trains."""

    target_accuracy: float = 0.3
    """Stop once one-sample (temperature 1) dev accuracy reaches this."""
    max_steps: int = 3000
    """Stop here even if the target was not reached."""
    eval_every: int = 25
    """Optimizer steps between dev evaluations."""
    lr: float = 1e-3
    """AdamW learning rate."""
    batch_size: int = 64
    """Problems per optimizer step."""

    def __post_init__(self) -> None:
        if not 0 <= self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in [0, 1], got {self.target_accuracy!r}")
        for name in ("max_steps", "eval_every", "batch_size"):
            check_int(name, getattr(self, name))
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _settings(
    task_name: str,
    task_options: dict[str, Any],
    seed: int,
    model_options: dict[str, Any] | None,
    schedule: WarmStartSchedule,
) -> dict[str, Any]:
    """Everything that determines the warm-started weights: the cache key."""
    vocab_size = CharTokenizer().vocab_size
    model = inspect.signature(tiny_qwen2_config).bind(vocab_size, **(model_options or {}))
    model.apply_defaults()
    # Defaults are spelled out so that {} and the explicit defaults share one cache entry.
    task = inspect.signature(TASKS[task_name]).bind(**task_options) if task_name in TASKS else None
    if task is not None:
        task.apply_defaults()
    settings = {
        "format_version": FORMAT_VERSION,
        "task": task_name,
        "task_options": dict(task.arguments) if task is not None else task_options,
        "seed": seed,
        "model": dict(model.arguments),
        **asdict(schedule),
    }
    if task is not None and hasattr(TASKS[task_name], "observation_spans"):
        # Only tasks that mark observations get the key: every other cache key is unchanged.
        settings["observations_in_loss"] = False
    return settings


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the block with `count` torch intra-op threads, then restore the caller's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train(model, tokenizer, task: Task, settings: dict, progress: bool) -> tuple[int, float]:
    """AdamW on the target + EOS cross-entropy; returns (steps taken, last dev accuracy).

    Trains on the task's train split and gates on its dev split, never on eval."""
    seed, max_steps, every = settings["seed"], settings["max_steps"], settings["eval_every"]
    train, dev = task.problems("train"), task.problems("dev")
    if not train or not dev:
        raise ValueError(f"warm start needs non-empty train and dev splits of {task.name!r}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"])
    batches = _batches(train, settings["batch_size"], random.Random(seed))
    max_new_tokens = max(len(tokenizer.encode(p.target)) for p in dev) + 4
    target = f"dev accuracy {settings['target_accuracy']:.2f}"
    report = _Progress(f"warm start {task.name}", max_steps, progress, target, every)
    observations = getattr(task, "observation_spans", None)
    model.train()
    accuracy, step = 0.0, 0
    with report:
        while step < max_steps:
            loss = _train_step(model, tokenizer, next(batches), optimizer, observations)
            step += 1
            report.step()
            if step % every == 0 or step == max_steps:
                generator = torch.Generator().manual_seed(seed + DEV_SEED_OFFSET)
                accuracy = dev_accuracy(model, tokenizer, task, dev, generator, max_new_tokens)
                report.check(step, loss, accuracy)
                if accuracy >= settings["target_accuracy"]:
                    break
    return step, accuracy


class _Progress:
    """A bar on a terminal; elsewhere (logs, CI, pipes) one plain line per dev check, with
    the ETA to the step cap (an upper bound: the target usually ends it sooner). Both open
    with what the warm start stops at; `_train_and_cache` closes with where it is cached.
    Durations read as `rlvr.runlog.progress` writes them (`duration`)."""

    def __init__(self, desc: str, total: int, enabled: bool, target: str, every: int) -> None:
        self.desc, self.total, self.enabled = desc, total, enabled
        self.lines = enabled and not sys.stderr.isatty()
        self.bar = tqdm(total=total, desc=desc, disable=not enabled or self.lines)
        self.started = time.perf_counter()
        if enabled:
            tqdm.write(
                f"{desc}: stops at {target} or {total} steps (dev checked every {every}; "
                f"cached for the next run)",
                file=sys.stderr,
            )

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    def step(self) -> None:
        self.bar.update(1)

    def check(self, step: int, loss: float, accuracy: float) -> None:
        self.bar.set_postfix(loss=f"{loss:.3f}", dev_acc=f"{accuracy:.3f}")
        if self.lines:
            elapsed = time.perf_counter() - self.started
            eta = elapsed / step * (self.total - step)
            print(
                f"{self.desc}: step {step}/{self.total} loss {loss:.3f} "
                f"dev_acc {accuracy:.3f} elapsed {duration(elapsed)}, at most {duration(eta)} "
                f"to go",
                file=sys.stderr,
                flush=True,
            )


def _batches(problems: list[Problem], batch_size: int, rng: random.Random):
    """Endless shuffled epochs of `batch_size` problems (the last partial batch is dropped
    unless the split is smaller than one batch)."""
    while True:
        order = list(problems)
        rng.shuffle(order)
        for start in range(0, max(len(order) - batch_size, 0) + 1, batch_size):
            yield order[start : start + batch_size]


def _train_step(
    model,
    tokenizer: CharTokenizer,
    batch: list[Problem],
    optimizer,
    observations: Callable[[str], list[tuple[int, int]]] | None = None,
) -> float:
    """One AdamW step on −mean log π(target + EOS | prompt) per target token; with
    `observations` (a task's `observation_spans`), the environment's replies inside a
    target stay in the context but out of the loss and its count, as in RL, where they
    are forced tokens (and the model could not predict them: they are the tool's output)."""
    targets = [[*tokenizer.encode(p.target), tokenizer.eos_token_id] for p in batch]
    steps = max(len(t) for t in targets)
    response_ids = torch.full((len(batch), steps), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((len(batch), steps))
    for b, ids in enumerate(targets):
        response_ids[b, : len(ids)] = torch.tensor(ids)
        response_mask[b, : len(ids)] = 1.0
    prompt_ids = [tokenizer.encode(p.prompt) for p in batch]
    logprobs = response_logprobs(
        model, prompt_ids, response_ids, response_mask, tokenizer.pad_token_id
    )
    if observations is None:
        loss = -logprobs.sum() / response_mask.sum()
    else:
        supervised = response_mask * _policy_mask(tokenizer, batch, observations, steps)
        loss = -(logprobs * supervised).sum() / supervised.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach().item()


def _policy_mask(tokenizer, batch: list[Problem], observations, steps: int) -> torch.Tensor:
    """(B, steps): 0 on the tokens of each target's observation spans, else 1."""
    mask = torch.ones((len(batch), steps))
    for b, problem in enumerate(batch):
        for start, end in observations(problem.target):
            first = len(tokenizer.encode(problem.target[:start]))
            mask[b, first : first + len(tokenizer.encode(problem.target[start:end]))] = 0.0
    return mask


def dev_accuracy(
    model: PreTrainedModel,
    tokenizer: CharTokenizer,
    task: Task,
    problems: list[Problem],
    generator: torch.Generator,
    max_new_tokens: int,
) -> float:
    """Fraction of `problems` solved by one temperature-1 sample (episode, for a multi-turn
    task) each."""
    params = SamplingParams(group_size=1, temperature=1.0, max_new_tokens=max_new_tokens)
    generation = generate_for(HFEngine(model, tokenizer), task, problems, params, generator)
    verdicts = [task.verify(p, text) for p, text in zip(problems, generation.texts, strict=True)]
    return sum(v.correct for v in verdicts) / len(verdicts)


def _save_atomically(path: Path, model, tokenizer, info: dict) -> None:
    """Write into a temporary sibling, then rename: an interrupted run leaves no cache entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save(staging)
        (staging / META_FILE).write_text(json.dumps(info, indent=2, default=str))
        os.replace(staging, path)
    except OSError:
        if not (path / META_FILE).is_file():  # not a lost race with a concurrent writer
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _load_cached(path: Path) -> tuple[PreTrainedModel, CharTokenizer, dict[str, Any]]:
    info = json.loads((path / META_FILE).read_text())
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=ATTN_IMPLEMENTATION)
    model.train()
    return model, CharTokenizer.load(path), {**info, "cache_hit": True, "cache_path": str(path)}
