"""A list of `Datum`s checked and packed into right-padded tensors for one forward pass.

Every check names the datum, the field, the value and what would be valid, so a mistake in
a user's loop reads as one line instead of a shape error from deep inside the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from rlvr.service.images import ImageSpec, model_prompt
from rlvr.service.types import Datum

INTEGER_INPUTS = ("target_tokens",)
IGNORE_TARGET = -100
"""A target that no loss reads (PyTorch's `ignore_index`, the remote APIs' convention)."""
BINARY_INPUTS = ("response_mask",)
# The Tinker SDK's names for an input rlvr names otherwise (same meaning, same values).
SDK_NAMES = {"sequence_ratio_mask": "response_mask"}


class Batch(NamedTuple):
    """B datums, N = the longest model_input; padding is 0 everywhere and out of `mask`.
    A target of -100 is stored as token 0 and is out of `active`."""

    input_ids: list[list[int]]  # (B) model_input tokens, unpadded (ImagePrompt: with pictures)
    target_tokens: torch.Tensor  # (B, N) long
    inputs: dict[str, torch.Tensor]  # name → (B, N) float32, the other loss_fn_inputs
    mask: torch.Tensor  # (B, N) float32: 1 on each datum's own positions
    active: torch.Tensor  # (B, N) float32: `mask` and a target other than -100


def as_tensor(value: Any, what: str) -> torch.Tensor:
    """A 1-D tensor from a TensorData, tensor, numpy array or list."""
    if hasattr(value, "to_torch"):
        value = value.to_torch()
    try:
        tensor = torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{what} must be a 1-D array of numbers, got {value!r:.80}: {err}"
        ) from None
    if tensor.dim() != 1:
        raise ValueError(
            f"{what} must be 1-D (one value per position), got shape {tuple(tensor.shape)}"
        )
    return tensor.detach().cpu()


def pack(
    datums: Sequence[Datum],
    required: Sequence[str],
    vocab_size: int,
    loss_fn: str,
    max_len: int | None = None,
    spec: ImageSpec | None = None,
    model_name: str = "the model",
) -> Batch:
    """Check that each datum holds exactly the `required` inputs, one per model_input
    position, finite, with token ids in [0, vocab_size) (targets may also be -100) and at
    most `max_len` tokens (the model's context; None: no limit); pack them into a `Batch`.
    A model_input's image chunks become `spec`'s image tokens (an `ImagePrompt` row,
    service/images.py); `model_name` names a text model that refuses them."""
    if not datums:
        raise ValueError(f"forward_backward(loss_fn={loss_fn!r}) needs at least one Datum")
    rows, columns = [], {name: [] for name in required}
    for i, datum in enumerate(datums):
        tokens = _model_input(datum, i, vocab_size, spec, model_name)
        if max_len is not None and len(tokens) > max_len:
            raise ValueError(
                f"datum {i}: model_input has {len(tokens)} tokens, more than the model's "
                f"context of {max_len} positions"
            )
        given = {SDK_NAMES.get(k, k): v for k, v in datum.loss_fn_inputs.items()}
        if len(given) < len(datum.loss_fn_inputs):
            raise ValueError(
                f"datum {i}: loss_fn_inputs hold both names of one input: {SDK_NAMES}; give one"
            )
        missing = [n for n in required if n not in given]
        extra = sorted(set(given) - set(required))
        if missing or extra:
            raise ValueError(
                f"datum {i}: loss_fn={loss_fn!r} takes loss_fn_inputs {list(required)}; "
                + (f"missing {missing}" if missing else f"unknown {extra}")
            )
        for name in required:
            what = f"datum {i}: loss_fn_inputs[{name!r}]"
            values = as_tensor(given[name], what)
            if len(values) != len(tokens):
                raise ValueError(
                    f"{what} has {len(values)} values but model_input has {len(tokens)} "
                    "tokens; every loss_fn_input has one value per model_input position"
                )
            columns[name].append(_checked(values, what, name, vocab_size))
        rows.append(tokens)
    return pack_rows(rows, columns)


def pack_rows(rows: list[list[int]], columns: dict[str, list[torch.Tensor]]) -> Batch:
    """Checked rows and their loss inputs (one value per position each) as a `Batch`."""
    width = max(map(len, rows))
    mask = torch.zeros(len(rows), width)
    for b, tokens in enumerate(rows):
        mask[b, : len(tokens)] = 1.0
    padded = {name: _pad(values, width) for name, values in columns.items()}
    targets = padded.pop("target_tokens").long()
    ignored = targets == IGNORE_TARGET
    active = mask * (~ignored).float()
    targets = targets.masked_fill(ignored, 0)
    return Batch(rows, targets, {k: v.float() for k, v in padded.items()}, mask, active)


def _model_input(
    datum: Datum, index: int, vocab_size: int, spec: ImageSpec | None, model_name: str
) -> list[int]:
    # Duck-typed, so the `tinker` package's own Datum and ModelInput are accepted too.
    model_input = getattr(datum, "model_input", None)
    if not hasattr(model_input, "to_ints") or not hasattr(datum, "loss_fn_inputs"):
        raise ValueError(
            f"datum {index} must be a Datum(model_input=ModelInput.from_ints(...), "
            f"loss_fn_inputs={{...}}), got {type(datum).__name__}"
        )
    return model_prompt(model_input, vocab_size, spec, model_name, f"datum {index}: model_input")


def _checked(values: torch.Tensor, what: str, name: str, vocab_size: int) -> torch.Tensor:
    if name in INTEGER_INPUTS:
        if values.is_floating_point() and not bool((values == values.round()).all()):
            raise ValueError(f"{what} must hold integer token ids, got {values.tolist()[:8]}")
        values = values.long()
        bad = values[((values < 0) | (values >= vocab_size)) & (values != IGNORE_TARGET)]
        if len(bad):
            raise ValueError(
                f"{what} holds token {int(bad[0])}, outside the vocabulary [0, {vocab_size}) "
                f"(or {IGNORE_TARGET}: a position no loss reads)"
            )
        return values
    values = values.double()
    if not bool(torch.isfinite(values).all()):
        bad = values[~torch.isfinite(values)][0].item()
        raise ValueError(f"{what} holds {bad}; every value must be a finite number")
    if name in BINARY_INPUTS and not bool(((values == 0) | (values == 1)).all()):
        bad = values[(values != 0) & (values != 1)][0].item()
        raise ValueError(f"{what} holds {bad}; it must be 0 or 1 (1: a sampled token)")
    return values


def _pad(values: list[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(values), width, dtype=values[0].dtype)
    for b, v in enumerate(values):
        out[b, : len(v)] = v
    return out


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
