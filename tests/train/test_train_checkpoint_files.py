"""Checkpoint files and RNG state without a model: rotation, checksums, generators."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr.train.checkpoints.checkpoint import (
    checkpoint_step,
    find_resumable,
    save_crash,
    save_rotating,
    verify_checkpoint,
)
from rlvr.train.checkpoints.rng_state import find_generators, load_rng_state, rng_state


class FakePolicy(torch.nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def save_pretrained(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        torch.save({"w": torch.full((3,), self.value)}, directory / "weights.pt")


class FakeTokenizer:
    def save(self, directory: Path) -> None:
        (directory / "tokenizer.json").write_text("{}")


def _save(run_dir, step, keep):
    return save_rotating(run_dir, FakePolicy(step), FakeTokenizer(), {"step": step}, keep=keep)


def test_rotation_keeps_the_newest_n_and_crash_is_apart(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, keep=3)
    save_crash(tmp_path, FakePolicy(-1.0), FakeTokenizer(), {"step": 5})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "checkpoint",
        "checkpoint.crash",
        "checkpoint.step-000003",
        "checkpoint.step-000004",
    ]  # keep=3: steps 5 (newest), 4 and 3; the crash state is not one of them
    assert checkpoint_step(tmp_path / "checkpoint") == 5
    assert find_resumable(tmp_path) == tmp_path / "checkpoint"


def test_a_flipped_byte_is_detected_and_passed_over(tmp_path):
    _save(tmp_path, 1, keep=2)
    _save(tmp_path, 2, keep=2)
    weights = tmp_path / "checkpoint" / "policy" / "weights.pt"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))
    assert verify_checkpoint(tmp_path / "checkpoint") == (
        "policy/weights.pt does not match its checksum"
    )
    with pytest.warns(UserWarning, match="unusable"):
        assert find_resumable(tmp_path) == tmp_path / "checkpoint.step-000001"


def test_every_generator_and_global_rng_is_restored():
    class Engine:
        def __init__(self):
            self.sampler = torch.Generator().manual_seed(1)

    class Owner:  # a trainer with a generator added later, and one inside its engine
        def __init__(self):
            self.generator = torch.Generator().manual_seed(0)
            self.shuffle_generator = torch.Generator().manual_seed(2)
            self.engine = Engine()

    owner = Owner()
    assert set(find_generators(owner)) == {"generator", "shuffle_generator", "engine.sampler"}

    def draws():
        gens = find_generators(owner).values()
        return (
            [torch.rand(2, generator=g).tolist() for g in gens],
            random.random(),
            float(np.random.rand()),
            torch.rand(1).item(),
        )

    state = rng_state(owner)
    first = draws()
    load_rng_state(owner, state)
    assert draws() == first
