"""Helpers of the resume tests: `rlvr train` in a subprocess, killed and resumed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
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
    return [sys.executable, "-m", "rlvr.cli", "train", *args]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        train_command(*args), env=env(), capture_output=True, text=True, timeout=timeout
    )


def steps_logged(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            steps.append(json.loads(line)["step"])
    return steps


def start_and_signal(args: list[str], out: Path, at_step: int, sig: int):
    """Start `rlvr train`, send `sig` once step `at_step` is logged; returns the process
    after it exited."""
    proc = subprocess.Popen(
        train_command(*args), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 600
    while max(steps_logged(out), default=-99) < at_step:
        if proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    proc.stdout_text, proc.stderr_text = stdout, stderr
    return proc


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
