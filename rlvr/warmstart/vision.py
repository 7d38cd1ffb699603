"""Supervised warm start of the embedded vision-language model on an image task, so RL
starts from a partial pass rate: the text warm start's procedure (`supervised.py`: target
+ EOS cross-entropy, never the prompt, stopping on sampled dev accuracy, cached on disk
by everything that determines it) with `rlvr.vision.TinyVLM` as the policy, its image
prompts encoded with their pixels (`encode_image_problems`)."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rlvr.models.logprobs import response_logprobs
from rlvr.models.tiny import tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer
from rlvr.tasks import Problem, make_task
from rlvr.vision import TinyVLM, VisionSettings, VisionTokenizer, encode_image_problems
from rlvr.vision.model import build_tiny_vlm
from rlvr.warmstart.supervised import (
    DEV_SEED_OFFSET,
    META_FILE,
    TRAIN_THREADS,
    _batches,
    _Progress,
    _save_atomically,
    cached,
    dev_accuracy,
    torch_threads,
)

FORMAT_VERSION = 1
TEXT_MODEL = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 4, "intermediate": 256}
"""The language side: the embedded Qwen2 at half width and depth (a CPU warm start in
about a minute); the vision side: `VisionSettings` at the task's image size."""


def warm_start_vision(
    task_name: str,
    task_options: dict[str, Any],
    seed: int,
    target_accuracy: float = 0.4,
    max_steps: int = 1500,
    eval_every: int = 25,
    lr: float = 1e-3,
    batch_size: int = 32,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[TinyVLM, VisionTokenizer, dict[str, Any]]:
    """The tiny VLM trained on image task `task_name` until one-sample dev accuracy ≥
    `target_accuracy` (checked every `eval_every` steps) or `max_steps`; from the cache
    when present. Returns (model in train mode, tokenizer, info)."""
    task = make_task(task_name, **task_options)
    vision = VisionSettings(image_size=task.image_size, patch_size=task.cell)
    settings = {
        "format_version": FORMAT_VERSION,
        "task": task_name,
        "task_options": task_options,
        "seed": seed,
        "text": TEXT_MODEL,
        "vision": vision.__dict__,
        **dict(target_accuracy=target_accuracy, max_steps=max_steps, eval_every=eval_every),
        **dict(lr=lr, batch_size=batch_size),
    }
    return cached(
        settings,
        cache_dir,
        "vlm-",
        _load,
        lambda path: _train_and_cache(path, task, vision, settings, progress),
    )


def _train_and_cache(path: Path, task, vision: VisionSettings, settings: dict, progress: bool):
    text = tiny_qwen2_config(CharTokenizer().vocab_size, **TEXT_MODEL)
    model = build_tiny_vlm(text, vision, settings["seed"])
    tokenizer = VisionTokenizer(CharTokenizer(), vision.tokens_per_image)
    started = time.perf_counter()
    with torch_threads(TRAIN_THREADS):
        steps, accuracy = _train(model, tokenizer, task, settings, progress)
    info = {
        "steps": steps,
        "dev_accuracy": accuracy,
        "reached_target": accuracy >= settings["target_accuracy"],
        "seconds": round(time.perf_counter() - started, 2),
        "settings": settings,
    }
    _save_atomically(path, model, tokenizer, info)
    if progress:
        print(
            f"warm start {settings['task']} (tiny VLM): dev accuracy {accuracy:.3f} after "
            f"{steps} steps, {info['seconds']:.0f}s; cached at {path}",
            file=sys.stderr,
            flush=True,
        )
    model.train()
    return model, tokenizer, {**info, "cache_hit": False, "cache_path": str(path)}


def _load(path: Path) -> tuple[TinyVLM, VisionTokenizer, dict[str, Any]]:
    info = json.loads((path / META_FILE).read_text())
    model = TinyVLM.from_pretrained(path)
    model.train()
    tokenizer = VisionTokenizer.load(path, CharTokenizer.load(path))
    return model, tokenizer, {**info, "cache_hit": True, "cache_path": str(path)}


def _train(model, tokenizer, task, settings: dict, progress: bool) -> tuple[int, float]:
    """AdamW on the target + EOS cross-entropy of the train split, gated on dev."""
    seed, max_steps, every = settings["seed"], settings["max_steps"], settings["eval_every"]
    train, dev = task.problems("train"), task.problems("dev")
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"])
    batches = _batches(train, settings["batch_size"], random.Random(seed))
    max_new_tokens = task.default_max_new_tokens
    target = f"dev accuracy {settings['target_accuracy']:.2f}"
    report = _Progress(f"warm start {task.name} (tiny VLM)", max_steps, progress, target, every)
    model.train()
    accuracy, step = 0.0, 0
    with report:
        while step < max_steps:
            loss = _train_step(model, tokenizer, next(batches), optimizer)
            step += 1
            report.step()
            if step % every == 0 or step == max_steps:
                generator = torch.Generator().manual_seed(seed + DEV_SEED_OFFSET)
                accuracy = dev_accuracy(model, tokenizer, task, dev, generator, max_new_tokens)
                report.check(step, loss, accuracy)
                if accuracy >= settings["target_accuracy"]:
                    break
    return step, accuracy


def _train_step(model, tokenizer, batch: list[Problem], optimizer) -> float:
    """One AdamW step on −mean log π(target + EOS | prompt with its image) per token."""
    targets = [[*tokenizer.encode(p.target), tokenizer.eos_token_id] for p in batch]
    steps = max(map(len, targets))
    response_ids = torch.full((len(batch), steps), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((len(batch), steps))
    for b, ids in enumerate(targets):
        response_ids[b, : len(ids)] = torch.tensor(ids)
        response_mask[b, : len(ids)] = 1.0
    prompts = encode_image_problems(tokenizer, batch)
    logprobs = response_logprobs(
        model, prompts, response_ids, response_mask, tokenizer.pad_token_id
    )
    loss = -logprobs.sum() / response_mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach().item()
