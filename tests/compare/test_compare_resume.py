"""`rlvr compare` resumes killed cells, does only what it was asked, and records every
invocation."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from compare_testlib import TINY, tiny_spec
from process_testlib import env, rlvr_command, start_and_signal, steps_logged

import rlvr.compare.runner as runner
from rlvr.cli import main
from rlvr.compare import run_matrix
from rlvr.train.loop import Trainer
from rlvr.train.run import RunInterrupted

QUIET = {"log": lambda message: None}
SMALL_SETS = [f"--set={k}={v}" for k, v in TINY.items() if k != "task_options"] + [
    "--set=task_options.digits=2",
    "--set=task_options.ops=+",
    "--set=save_every=2",
]


def _invocations(out):
    return [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()]


def test_a_killed_cell_resumes_from_its_checkpoint(tmp_path, monkeypatch, one_thread):
    spec = tiny_spec(
        base={**TINY, "save_every": 1}, recipes=["grpo"], seeds=[0], budget={"value": 3}
    )
    real, calls = Trainer.train_step, []

    def killed_in_step_3(self):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a second Ctrl-C would: the step is abandoned
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", killed_in_step_3)
    with pytest.raises(RunInterrupted):
        run_matrix(spec, tmp_path, **QUIET)
    cell = tmp_path / "cells" / "grpo-seed0"
    before = (cell / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in before] == [0, 1, 2]
    monkeypatch.setattr(Trainer, "train_step", real)
    run = run_matrix(spec, tmp_path, **QUIET)
    assert run.ran == ["grpo-seed0"] and not run.failed
    after = (cell / "metrics.jsonl").read_text().splitlines()
    assert after[:3] == before  # steps 0-2 kept as they were (wall times included): resumed
    assert [json.loads(r)["step"] for r in after] == [0, 1, 2, 3]
    assert [r["status"] for r in _invocations(tmp_path)] == ["interrupted", "completed"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([], "no matrix.yaml"),  # no silent default matrix in a mistyped directory
        (["--recipes", "grpo", "--steps", "0"], "--steps"),
        (["--recipes", "grpo", "--budget", "tokens", "--tokens", "0"], "--tokens"),
        (["--recipes", "grpo", "--tokens", "0"], "--tokens"),
        (["--recipes", "grpo,grpo"], "duplicate condition(s) grpo"),
    ],
)
def test_compare_refuses_what_it_would_not_do_as_asked(extra, named, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert not out.exists()


def test_unwritable_out_is_one_line(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("not a directory")
    assert main(["compare", "--out", str(file), "--recipes", "grpo", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_out_is_one_line(tmp_path, capsys):
    tmp_path.chmod(0o500)
    try:
        code = main(["compare", "--out", str(tmp_path / "c"), "--recipes", "grpo"])
    finally:
        tmp_path.chmod(0o700)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1


def test_interrupted_compare_exits_130_and_is_recorded(tmp_path, monkeypatch, capsys):
    seen = []

    def interrupted(config):
        seen.extend(_invocations(out))  # recorded before any cell runs: survives SIGKILL
        raise KeyboardInterrupt

    out = tmp_path / "cmp"
    monkeypatch.setattr(runner, "run_cell", interrupted)
    argv = ["compare", "--out", str(out), "--recipes", "grpo", "--steps", "1"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert f"resume with: rlvr compare --out {out}" in err and "Traceback" not in err
    (record,) = _invocations(out)
    assert record["status"] == "interrupted" and record["argv"] == argv
    assert [r["status"] for r in seen] == ["running"] and seen[0]["id"] == record["id"]


def test_ctrl_c_in_compare_exits_130_and_the_rerun_resumes_the_cell(tmp_path):
    out = tmp_path / "cmp"
    args = ["--recipes", "grpo", "--steps", "5", "--out", str(out), *SMALL_SETS]
    cell = out / "cells" / "grpo-seed0"
    stopped = start_and_signal(rlvr_command("compare", *args), cell, 2, signal.SIGINT)
    assert stopped.returncode == 130, stopped.stderr_text
    assert "Traceback" not in stopped.stderr_text
    assert f"resume with: rlvr compare --out {out}" in stopped.stderr_text.splitlines()[-1]
    kept = (cell / "metrics.jsonl").read_text().splitlines()
    done = subprocess.run(
        rlvr_command("compare", "--out", str(out)), env=env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    after = (cell / "metrics.jsonl").read_text().splitlines()
    assert after[: len(kept)] == kept and steps_logged(cell) == [0, 1, 2, 3, 4, 5]
    assert [r["status"] for r in _invocations(out)] == ["interrupted", "completed"]


def test_sigterm_to_a_parallel_compare_checkpoints_every_running_cell(tmp_path):
    out = tmp_path / "cmp"
    # The signal goes once BOTH cells have logged step 1, and 1,000 steps leave neither
    # near its end by then. Signalling at the first cell's step 1 raced: under load one
    # cell started ~20 s late, and the other had finished first (8 steps, then even 60).
    steps = 1000
    args = ["--recipes", "grpo,dr_grpo", "--steps", str(steps), "--jobs", "2", "--out", str(out)]
    cells = [out / "cells" / name for name in ("grpo-seed0", "dr_grpo-seed0")]
    stopped = start_and_signal(
        rlvr_command("compare", *args, *SMALL_SETS), cells, 1, signal.SIGTERM
    )
    assert stopped.returncode == 130, stopped.stderr_text
    assert "Traceback" not in stopped.stderr_text
    for cell in cells:  # the workers were stopped too
        logged = max(steps_logged(cell), default=-1)
        assert 1 <= logged < steps and not (cell / "summary.json").exists()
    assert _invocations(out)[-1]["status"] == "interrupted"
