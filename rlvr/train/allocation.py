"""Where a training process's memory goes on a CPU, and when it is allocated.

A step allocates and frees the same large buffers every time: activations, gradients,
each chunk of LM-head logits (`rlvr.models.logprobs`), AdamW's temporaries. glibc's
malloc gives buffers of 32 MB and more straight from the kernel and hands them back when
they are freed, and it returns a heap's free top above 128 KB to 64 MB likewise; the next
step then faults every page in again, zeroed by the kernel: 2–3 GB a SmolLM2-135M step
(500–700 thousand page faults), over a second of it. Two things stop that:

- `keep_freed_pages`: freed memory stays with the process for the next step to reuse;
- `allocate_adamw_state`: AdamW's moments are allocated with the optimizer, before the
  first step's activations, instead of by the first `step()` above them, so the first
  step's heap is the size of every later one's and step 2 does not grow it again.

Neither changes a number: the same arithmetic runs on reused pages, and the moments are
the zeros AdamW's first step would have made (tests/train/test_allocation.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

# mallopt's parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
KEPT = 2**31 - 1  # the largest free heap top glibc keeps (bytes): never trimmed by a step


def keep_freed_pages(device: torch.device | str = "cpu") -> bool:
    """On a CPU `device`, tell glibc's malloc to keep freed memory for reuse: no buffer from
    `mmap` (each one is faulted in afresh and returned when freed) and no trimming of the
    heap's free top. The process's resident memory then does not fall between steps.
    Returns whether it took effect (False for another device, off Linux or without glibc,
    where nothing is changed). Process-wide, and for the rest of the process."""
    if torch.device(device).type != "cpu" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, KEPT))


def allocate_adamw_state(optimizer: torch.optim.AdamW) -> torch.optim.AdamW:
    """Give every parameter that trains its AdamW state now, as `AdamW.step` would at its
    first call (step 0, zero first and second moments, and the AMSGrad maximum if on).
    A parameter that never gets a gradient is skipped by `step` all the same."""
    wide = torch.get_default_dtype() == torch.float64
    for group in optimizer.param_groups:
        fused, on_device = bool(group.get("fused")), group.get("capturable") or group.get("fused")
        scalar = torch.float64 if wide and not fused else torch.float32
        for p in group["params"]:
            if not p.requires_grad or optimizer.state.get(p):  # `state` is a defaultdict
                continue
            state = optimizer.state[p]
            state["step"] = (
                torch.zeros((), dtype=scalar, device=p.device)
                if on_device
                else torch.tensor(0.0, dtype=scalar, device="cpu")
            )
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if group.get("amsgrad"):
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    return optimizer


def policy_adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """The trainer's AdamW over `model`'s parameters; on a CPU in a single process (no
    sharded or replicated state to place) with its state allocated now."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return allocate_adamw_state(optimizer) if on_cpu and not distributed else optimizer
