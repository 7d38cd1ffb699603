"""Checkpoints that are never lost: written to a temporary directory, fsynced, renamed.

A checkpoint holds everything a run needs to continue exactly: policy (and critic) weights,
optimizer states, the prompt pool's data order and retirement state, RNG states, the step
counter, run totals and the metrics offset (see `Trainer.state_dict` and `rlvr.train.run`).

A LoRA policy is saved twice: merged (W + (α/r)·B·A under the base model's names, in
`policy/`, what `rlvr eval --model` and inference engines read) and as its adapter alone
(`adapter/`, peft's format). A resumed LoRA run rebuilds the policy from the original base
model and loads the adapter, so π_ref (the adapters switched off) is the base again and
the AdamW state, saved over the policy's parameters, lines up with the adapters.

Layout of a run directory:

    checkpoint/              the newest good checkpoint (`rlvr eval --model checkpoint/policy`)
      policy/                weights (merged, for LoRA) and tokenizer
      adapter/               LoRA runs: the adapter alone (adapter_config.json, .safetensors)
      trainer_state.pt       optimizers, data order, RNG states, step, run totals
      critic.pt              recipes with a critic
      manifest.json          written last: the step and the sha256 of every file above
    checkpoint.step-000010/  older good ones, `keep` in all counting the newest
    checkpoint.crash/        the state at a crash or divergence: never resumed from
    checkpoint.unusable-0/   one that failed its checksum, set aside when a run resumed

Every checkpoint carries `manifest.json` (its step and the sha256 of every file), written
last: a checkpoint without a manifest, or whose files do not match it, is partial or
corrupt, and `find_resumable` passes over it to the previous good one with a warning.

The manifest guards against partial writes, not against a hostile author (who writes the
manifest too). What guards against one is that `trainer_state.pt` is read with
`torch.load(weights_only=True)`: tensors and plain values only, so loading a checkpoint or a
service state from someone else runs none of its code (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.models.hf_policy import load_adapter, lora_layers, save_adapter, save_kwargs
from rlvr.models.quiet import quiet_transformers

LATEST = "checkpoint"
CRASH = "checkpoint.crash"
UNUSABLE = "checkpoint.unusable-"
MANIFEST = "manifest.json"
ADAPTER = "adapter"
_OLDER = re.compile(r"^checkpoint\.step-(\d+)$")
try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # NumPy 1
    from numpy.core.multiarray import _reconstruct
OLDER_RNG_GLOBALS = [_reconstruct, np.ndarray, np.dtype, np.dtypes.UInt32DType]
"""The only globals a trainer state may name: a checkpoint of an older rlvr stored NumPy's
RNG key as a uint32 array. Arrays of any other dtype (objects: pickles inside) are refused."""


def save_checkpoint(
    directory: Path, policy, tokenizer, state: dict[str, Any], critic=None, kind: str = "good"
) -> Path:
    """Write `directory` atomically: a half-written checkpoint never replaces a good one."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with quiet_transformers():
        policy.save_pretrained(tmp / "policy", **save_kwargs(policy))
    tokenizer.save(tmp / "policy")
    if lora_layers(policy):  # the merged weights alone cannot be split back into base + B·A
        save_adapter(policy, tmp / ADAPTER)
    if critic is not None:
        torch.save(critic.state_dict(), tmp / "critic.pt")
    torch.save(state, tmp / "trainer_state.pt")
    _write_manifest(tmp, {"step": int(state.get("step", 0)), "kind": kind})
    old = directory.with_name(directory.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        os.replace(directory, old)
    os.replace(tmp, directory)
    _fsync_dir(directory.parent)
    shutil.rmtree(old, ignore_errors=True)
    return directory


def save_rotating(
    run_dir: Path, policy, tokenizer, state: dict[str, Any], critic=None, keep: int = 2
) -> Path:
    """Make a new good `checkpoint/` at `state['step']`, keeping the previous newest as
    `checkpoint.step-NNNNNN/` and pruning all but the `keep` newest good ones."""
    run_dir = Path(run_dir)
    latest = run_dir / LATEST
    tmp = run_dir / (LATEST + ".tmp")
    save_checkpoint(tmp, policy, tokenizer, state, critic)  # tmp/ is complete, fsynced
    if latest.exists():
        step = _manifest_step(latest)
        if step is None:  # a corrupt newest: never keep it as a fallback
            shutil.rmtree(latest)
        else:
            os.replace(latest, run_dir / f"{LATEST}.step-{step:06d}")
    os.replace(tmp, latest)
    _fsync_dir(run_dir)
    older = sorted(_older(run_dir), key=lambda p: _step_of_name(p), reverse=True)
    for stale in older[max(keep - 1, 0) :]:
        shutil.rmtree(stale, ignore_errors=True)
    return latest


def save_crash(run_dir: Path, policy, tokenizer, state: dict[str, Any], critic=None) -> Path:
    """The state at a crash or divergence, beside (never over) the good checkpoints."""
    return save_checkpoint(Path(run_dir) / CRASH, policy, tokenizer, state, critic, kind="crash")


def find_resumable(run_dir: Path) -> Path | None:
    """The newest good checkpoint whose files match its manifest, or None. Every newer one
    that fails the check is named in a warning."""
    candidates = []
    for path in [Path(run_dir) / LATEST, *_older(Path(run_dir))]:
        if path.is_dir():
            candidates.append((_manifest_step(path) or -1, path))
    for _, path in sorted(candidates, key=lambda c: c[0], reverse=True):
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        warnings.warn(
            f"checkpoint {path} is unusable ({problem}); falling back to an older one if any",
            stacklevel=2,
        )
    return None


def set_aside_unusable(run_dir: Path) -> list[Path]:
    """Rename every good-looking checkpoint that fails its manifest check to
    `checkpoint.unusable-N/`, so rotation never keeps it as a fallback. Returns the new
    paths (kept for a post-mortem)."""
    moved = []
    for path in [Path(run_dir) / LATEST, *_older(Path(run_dir))]:
        if path.is_dir() and verify_checkpoint(path) is not None:
            index = len(list(Path(run_dir).glob(f"{UNUSABLE}*")))
            target = path.with_name(f"{UNUSABLE}{index}")
            os.replace(path, target)
            moved.append(target)
    return moved


def verify_checkpoint(path: Path) -> str | None:
    """None if every file of the checkpoint matches its manifest, else what is wrong."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError):
        return "no readable manifest.json: partial write"
    for name, digest in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if _sha256(file) != digest:
            return f"{name} does not match its checksum"
    return None


def checkpoint_step(path: Path) -> int | None:
    return _manifest_step(path)


def load_trainer_state(directory: Path) -> dict[str, Any]:
    """`trainer_state.pt` of a checkpoint or service state, read without running any of its
    code: a file that names anything but tensors, plain values and OLDER_RNG_GLOBALS is
    refused with a one-line ValueError."""
    path = Path(directory) / "trainer_state.pt"
    try:
        with torch.serialization.safe_globals(OLDER_RNG_GLOBALS):
            return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as error:
        named = re.search(r"GLOBAL ([\w.]+)", str(error))  # torch words it several ways
        what = f"it names {named.group(1)}" if named else "objects torch's safe loader refuses"
        raise ValueError(
            f"{path} holds more than tensors and plain values ({what}); rlvr does not load "
            f"it, since unpickling it could run code: use checkpoints and states that rlvr "
            f"wrote (docs/security.md, 'Checkpoints and states')"
        ) from None


def load_policy_weights(policy: torch.nn.Module, checkpoint: Path) -> None:
    """Load the checkpoint's policy into `policy`, built as the run builds it. A LoRA policy
    (the original base model with fresh adapters) takes the saved adapter and keeps its
    base, which is π_ref; any other policy takes the weights in `policy/`."""
    checkpoint = Path(checkpoint)
    if not lora_layers(policy):
        _load_pretrained(policy, checkpoint / "policy")
        return
    if not resumable_with(checkpoint, lora=True):
        raise ValueError(
            f"checkpoint {checkpoint} has no {ADAPTER}/ although policy.lora is set: it was "
            f"written by an rlvr that saved only the merged weights, which cannot be split "
            f"back into base model and adapter; start the run again with --overwrite"
        )
    load_adapter(policy, checkpoint / ADAPTER)


def resumable_with(checkpoint: Path, lora: bool) -> bool:
    """Whether `checkpoint` holds what a policy with (or without) LoRA resumes from: a LoRA
    checkpoint of an older rlvr has the merged weights only."""
    return not lora or (Path(checkpoint) / ADAPTER).is_dir()


def _load_pretrained(model: torch.nn.Module, directory: Path) -> None:
    """Copy the weights saved with `save_pretrained` in `directory` into `model`."""
    dtype = next(model.parameters()).dtype
    with quiet_transformers():
        saved = type(model).from_pretrained(directory, torch_dtype=dtype)
    model.load_state_dict(saved.state_dict())


def _older(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        return []
    return [p for p in run_dir.iterdir() if _OLDER.match(p.name) and p.is_dir()]


def _step_of_name(path: Path) -> int:
    return int(_OLDER.match(path.name).group(1))


def _manifest_step(path: Path) -> int | None:
    try:
        return int(json.loads((path / MANIFEST).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_manifest(directory: Path, info: dict[str, Any]) -> None:
    files = {}
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        _fsync_file(file)
        files[file.relative_to(directory).as_posix()] = _sha256(file)
    manifest = directory / MANIFEST
    manifest.write_text(json.dumps({**info, "files": files}, indent=1))
    _fsync_file(manifest)
    for sub in {p.parent for p in directory.rglob("*")} | {directory}:
        _fsync_dir(sub)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory
    finally:
        os.close(fd)
