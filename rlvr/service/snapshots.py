"""Sampler snapshots: a sampling client made from a training client keeps the weights of
the step it was made at, as the remote APIs' samplers do, without writing them to disk.

A snapshot copies the trainable tensors (a LoRA policy's adapters: small; a full
fine-tune's every weight) when it is taken. While the snapshot's sampler draws or scores,
under the training client's lock, those tensors are copied into the shared module if
the trainer has moved on since, and the trainer's own are copied back afterwards, bit for
bit. Nothing else is touched (the optimizer's moments and the accumulated gradients live
elsewhere). An engine with its own copy of the weights (vLLM) cannot be swapped cheaply:
there a sampler of an older step is refused (`StaleWeightsError`), as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch


class StaleWeightsError(RuntimeError):
    """A sampling client was used after the training client's weights moved on, where the
    engine cannot put the old ones back (vLLM), or the weights moved while it sampled."""


class WeightsSnapshot:
    """The trainable tensors of `model` at weights version `version`."""

    def __init__(self, model: torch.nn.Module, version: int) -> None:
        self.version = version
        with torch.no_grad():
            self.tensors = {
                name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad
            }

    @contextlib.contextmanager
    def applied(self, model: torch.nn.Module, current_version: int) -> Iterator[None]:
        """Inside the block `model` holds this snapshot's weights; after it, its own."""
        if current_version == self.version:
            yield
            return
        params = dict(model.named_parameters())
        with torch.no_grad():
            own = {name: params[name].detach().clone() for name in self.tensors}
            for name, tensor in self.tensors.items():
                params[name].copy_(tensor)
        try:
            yield
        finally:
            with torch.no_grad():
                for name, tensor in own.items():
                    params[name].copy_(tensor)


def snapshot_weights(
    lock: threading.RLock,
    model: torch.nn.Module,
    snapshot: WeightsSnapshot,
    version: Callable[[], int],
    describe: Callable[[], str],
    swappable: bool,
) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The context a snapshot sampler draws in: the trainer's lock held, the snapshot's
    weights in place, and a check after that the trainer's version did not move meanwhile
    (security audit F14: a sample never mixes two steps' weights)."""

    @contextlib.contextmanager
    def weights() -> Iterator[None]:
        with lock:
            before = version()
            if before != snapshot.version and not swappable:
                raise StaleWeightsError(describe())
            with snapshot.applied(model, before):
                yield
            if version() != before:
                raise StaleWeightsError(
                    f"the training client's weights moved (version {before} → {version()}) "
                    "while this sampler was using them; nothing it returned is kept"
                )

    return weights


def locked(lock: threading.RLock) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The context a sampler that owns its weights draws in: its lock held."""

    @contextlib.contextmanager
    def weights() -> Iterator[None]:
        with lock:
            yield

    return weights
