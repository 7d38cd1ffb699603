"""F1 of the security audit: a checkpoint or service state that someone else wrote must not
run code when it is loaded. The attack: a `trainer_state.pt` holding an object whose
`__reduce__` calls `os.system`, with `manifest.json` rewritten to match (whoever writes the
file writes the manifest too). Held when the load refuses with a one-line error and the
command never ran."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from process_testlib import env, rlvr_command

from rlvr.service import ServiceClient
from rlvr.train.checkpoints.checkpoint import (
    MANIFEST,
    _sha256,
    load_trainer_state,
    verify_checkpoint,
)
from rlvr.train.checkpoints.rng_state import load_rng_state, rng_state

REFUSED = r"trainer_state\.pt holds more than tensors and plain values \(it names posix\.system\)"


class RunsCode:
    """Unpickled, it runs `command` in a shell."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def plant_code(directory, marker) -> None:
    """Add a RunsCode that writes `marker` to the directory's trainer state (our own file,
    so reading it whole is safe here) and make its manifest match again."""
    path = directory / "trainer_state.pt"
    state = torch.load(path, weights_only=False)
    state["payload"] = RunsCode(f"echo code ran as $(id -u) > {marker}")
    torch.save(state, path)
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"]["trainer_state.pt"] = _sha256(path)
    (directory / MANIFEST).write_text(json.dumps(manifest))
    assert verify_checkpoint(directory) is None  # the manifest is no protection


def test_a_service_state_with_code_in_it_is_refused_unrun(tmp_path):
    service = ServiceClient(root=tmp_path / "root")
    trainer = service.create_training_client("embedded:arithmetic")
    path = Path(trainer.save_state("state").result().path)
    plant_code(path, tmp_path / "marker")
    for load in (
        service.create_training_client_from_state,
        service.create_training_client_from_state_with_optimizer,
        trainer.load_state,
        trainer.load_state_with_optimizer,
    ):
        with pytest.raises(ValueError, match=REFUSED):
            load(str(path))
    assert not (tmp_path / "marker").exists()


def test_rlvr_train_resume_of_a_checkpoint_with_code_in_it_is_refused_unrun(tmp_path):
    out, marker = tmp_path / "run", tmp_path / "marker"
    small = ["--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "eval_size=4"]
    first = subprocess.run(
        rlvr_command("train", "--steps", "1", "--out", str(out), "--no-progress", *small),
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,  # ~60 s alone; the CPU is shared with other tests
    )
    assert first.returncode == 0, first.stderr
    plant_code(out / "checkpoint", marker)
    resumed = subprocess.run(
        rlvr_command("train", "--resume", str(out), "--steps", "2", "--no-progress"),
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode != 0 and not marker.exists()
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("rlvr: error: ")]
    assert len(errors) == 1 and "it names posix.system" in errors[0], resumed.stderr[-3000:]


def test_rng_states_are_plain_values_and_restore_exactly():
    generator = torch.Generator().manual_seed(5)
    holder = type("Holder", (), {})()
    holder.generator = generator
    np.random.seed(3)
    np.random.normal()  # a cached Gaussian is part of the state too
    state = rng_state(holder)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # no global allowed at all
    expected = (np.random.normal(size=3), torch.rand(3, generator=generator))
    load_rng_state(holder, loaded)
    got = (np.random.normal(size=3), torch.rand(3, generator=generator))
    assert np.array_equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


def test_a_checkpoint_of_an_older_rlvr_still_loads(tmp_path):
    # older rlvr stored np.random.get_state(): a tuple holding a uint32 array
    np.random.seed(7)
    torch.save({"rng": {"numpy": np.random.get_state()}}, tmp_path / "trainer_state.pt")
    expected = np.random.normal(size=3)
    np.random.set_state(load_trainer_state(tmp_path)["rng"]["numpy"])
    assert np.array_equal(np.random.normal(size=3), expected)


def test_an_array_of_objects_is_refused(tmp_path):
    # an object array pickles its items: only the uint32 arrays of older checkpoints pass
    torch.save({"a": np.array([RunsCode("true")], dtype=object)}, tmp_path / "trainer_state.pt")
    with pytest.raises(ValueError, match=r"holds more than tensors and plain values"):
        load_trainer_state(tmp_path)
