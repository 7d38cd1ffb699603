"""Helpers of the resume tests: `rlvr train` in a subprocess, killed and resumed."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import torch
from process_testlib import env, rlvr_command, steps_logged
from process_testlib import start_and_signal as start_signalled
from safetensors.torch import load_file

from rlvr.train.checkpoints.checkpoint import save_checkpoint
from rlvr.train.loop import Trainer

__all__ = ["env", "steps_logged"]
SMALL_ARGS = [
    "--set", "prompts_per_step=4",
    "--set", "group_size=4",
    "--set", "eval_size=16",
    "--set", "eval_every=2",
    "--set", "task_options.digits=2",
    "--set", "task_options.ops=+",
    "--set", "save_every=2",  # a kill can land between checkpoints
    "--no-progress",
]  # fmt: skip


def train_command(*args: str) -> list[str]:
    return rlvr_command("train", *args)


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        train_command(*args), env=env(), capture_output=True, text=True, timeout=timeout
    )


def start_and_signal(args: list[str], out: Path, at_step: int, sig: int):
    """Start `rlvr train ARGS`, send `sig` once step `at_step` is logged."""
    return start_signalled(train_command(*args), out, at_step, sig)


def weights(directory: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(directory / "policy" / "model.safetensors"))
    if (directory / "critic.pt").exists():
        critic = torch.load(directory / "critic.pt", weights_only=True)
        tensors.update({f"critic.{k}": v for k, v in critic.items()})
    return tensors


def without_time(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


SIGKILL = signal.SIGKILL
SIGINT = signal.SIGINT
SIGTERM = signal.SIGTERM


def trained_and_saved(cfg, steps: int, directory):
    """A Trainer of `cfg` after `steps` steps, and the checkpoint it saved in `directory`
    (what `rlvr train` writes; the run state left empty)."""
    trainer = Trainer(cfg)
    for _ in range(steps):
        trainer.train_step()
        trainer.step += 1
    state = {**trainer.state_dict(), "run": {}}
    return trainer, save_checkpoint(directory, trainer.full_policy, trainer.tokenizer, state)
