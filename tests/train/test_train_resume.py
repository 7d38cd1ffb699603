"""Runs that survive: SIGKILL/SIGINT and resume, exact to the bit, in subprocesses."""

from __future__ import annotations

import random

import pytest
import torch
from resume_testlib import (
    SIGINT,
    SIGKILL,
    SIGTERM,
    SMALL_ARGS,
    run,
    start_and_signal,
    steps_logged,
    weights,
    without_time,
)

from rlvr.train.checkpoints.checkpoint import load_trainer_state

STEPS = 5


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs, one per recipe, made on first use."""
    made = {}

    def get(recipe):
        if recipe not in made:
            out = tmp_path_factory.mktemp("ref") / recipe
            done = run("--recipe", recipe, "--steps", str(STEPS), "--out", str(out), *SMALL_ARGS)
            assert done.returncode == 0, done.stderr
            made[recipe] = out
        return made[recipe]

    return get


@pytest.mark.parametrize("recipe", ["grpo", "ppo", "dapo"])  # plain, critic, dynamic sampling
def test_sigkill_then_resume_equals_an_uninterrupted_run(recipe, reference, tmp_path):
    at = random.randint(1, STEPS - 2)
    out = tmp_path / recipe
    args = ["--recipe", recipe, "--steps", str(STEPS), "--out", str(out), *SMALL_ARGS]
    killed = start_and_signal(args, out, at, SIGKILL)
    assert killed.returncode == -9, f"not killed at step {at}: {killed.stderr_text}"
    assert max(steps_logged(out)) < STEPS
    resumed = run("--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    ref = reference(recipe)
    assert steps_logged(out) == steps_logged(ref)  # no step missing or twice
    assert without_time(out) == without_time(ref), f"killed after step {at}"
    mine, theirs = weights(out / "checkpoint"), weights(ref / "checkpoint")
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine), f"killed after step {at}"


def test_sigint_exits_130_with_a_resume_line_and_resumes(reference, tmp_path):
    out = tmp_path / "run"
    args = ["--recipe", "grpo", "--steps", str(STEPS), "--out", str(out), *SMALL_ARGS]
    stopped = start_and_signal(args, out, 2, SIGINT)
    assert stopped.returncode == 130, stopped.stderr_text
    assert "Traceback" not in stopped.stderr_text
    last = stopped.stderr_text.strip().splitlines()[-1]
    assert f"resume with: rlvr train --resume {out}" in last
    assert (out / "summary.partial.json").exists() and (out / "curves.png").exists()
    assert not (out / "summary.json").exists()  # not finished: rlvr compare must not count it
    resumed = run("--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert without_time(out) == without_time(reference("grpo"))


def test_sigterm_checkpoints_the_finished_step_and_exits_130(tmp_path):
    out = tmp_path / "run"
    args = ["--steps", "50", "--out", str(out), *SMALL_ARGS, "--set", "save_every=0"]
    stopped = start_and_signal(args, out, 1, SIGTERM)
    assert stopped.returncode == 130, stopped.stderr_text
    assert "resume with: rlvr train --resume" in stopped.stderr_text
    logged = max(steps_logged(out))
    assert 1 <= logged < 50
    assert load_trainer_state(out / "checkpoint")["step"] == logged  # saved on the signal
