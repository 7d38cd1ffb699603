"""Mixed precision: bf16 compute over float32 master weights, and a bf16 copy to sample from.

`autocast("bf16", device)` runs matrix products in bfloat16 while the parameters, their
gradients and the optimizer state stay float32 (Micikevicius et al., arXiv:1710.03740, with
bf16 in place of fp16, so no loss scaling). What stays float32 inside it, and why:
the residual stream and RMSNorm (`fused_llama`), the LM head when `fp32_head` is on, and
every log-softmax, so log-probs, losses and normalisers are float32 (`logprobs`); a
critic's value head (`value`).

`low_precision_copy` / `copy_weights` give a rollout engine weights of its own in bf16, as
vLLM holds them: rounded to nearest from the master weights after every update, so the
copy is a function of the master weights alone (a resumed run re-derives it exactly).
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager, nullcontext

import torch

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def autocast(precision: str, device: torch.device | str) -> AbstractContextManager:
    """bf16 autocast on `device`'s type for precision "bf16"; a no-op for "fp32"."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=PRECISIONS[precision])


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast_dtype(device: torch.device | str) -> torch.dtype | None:
    """The dtype autocast computes products in on `device` here, None outside autocast."""
    kind = torch.device(device).type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def full_precision(device: torch.device | str) -> AbstractContextManager:
    """Autocast off for the block: what must stay float32 inside a bf16 forward."""
    return torch.autocast(torch.device(device).type, enabled=False)


def bf16_supported(device: torch.device | str) -> bool:
    """Whether `device` computes bf16 products natively (a CPU without AVX-512 BF16 or
    AMX emulates them, many times slower than float32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return True  # other accelerators: let torch say so if not


def low_precision_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A frozen copy of `model` whose parameters are in `dtype` (rounded to nearest). Buffers
    keep their dtype: rotary inverse frequencies rounded to bf16 would move every angle."""
    twin = copy.deepcopy(model)
    for p in twin.parameters():
        p.data = p.data.to(dtype)
        p.requires_grad_(False)
    return twin.eval()


@torch.no_grad()
def copy_weights(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Every parameter of `source` into `target`'s (same names), rounded to its dtype."""
    theirs = dict(target.named_parameters())
    mine = dict(source.named_parameters())
    if mine.keys() != theirs.keys():
        differ = sorted(mine.keys() ^ theirs.keys())
        raise ValueError(f"the sampler's copy does not match the policy: {differ[:3]}")
    for name, value in mine.items():
        theirs[name].copy_(value)
