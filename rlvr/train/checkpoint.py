"""Checkpoints that are never lost: written beside the old one, then swapped in atomically.

A checkpoint holds everything a run needs to continue: policy (and critic) weights,
optimizer states, the prompt pool's data order and retirement state, RNG states and the
step counter (exact resume is designed in; see DESIGN.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from rlvr.models.hf_policy import save_kwargs
from rlvr.models.warmstart import quiet_transformers


def save_checkpoint(directory: Path, policy, tokenizer, state: dict[str, Any], critic=None) -> Path:
    """Write `directory` atomically: a half-written checkpoint never replaces a good one."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with quiet_transformers():
        policy.save_pretrained(tmp / "policy", **save_kwargs(policy))
    tokenizer.save(tmp / "policy")
    if critic is not None:
        torch.save(critic.state_dict(), tmp / "critic.pt")
    torch.save(state, tmp / "trainer_state.pt")
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory


def load_trainer_state(directory: Path) -> dict[str, Any]:
    return torch.load(directory / "trainer_state.pt", weights_only=False)
