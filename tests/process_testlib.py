"""`rlvr` commands in subprocesses, signalled once a run has logged a given step."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rlvr_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", *args]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def steps_logged(out: Path) -> list[int]:
    """The steps in `out/metrics.jsonl` (a line being written is left out)."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            steps.append(json.loads(line)["step"])
    return steps


def start_and_signal(command: list[str], out: Path | list[Path], at_step: int, sig: int):
    """Start `command`, send `sig` once `out/metrics.jsonl` (every one, given a list of run
    directories) has logged `at_step`; returns the exited process with `stdout_text` and
    `stderr_text`."""
    proc = subprocess.Popen(
        command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    outs = out if isinstance(out, list) else [out]
    deadline = time.monotonic() + 600
    while min(max(steps_logged(o), default=-99) for o in outs) < at_step:
        if proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    proc.stdout_text, proc.stderr_text = stdout, stderr
    return proc
