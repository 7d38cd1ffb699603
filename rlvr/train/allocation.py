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

And `SlicedAdamW` steps each large tensor a slice at a time, so that AdamW's temporaries
are a slice's, not a whole tensor's (two of 113 MB for SmolLM2's embedding, placed above
everything else in the heap when they did not fit a freed gap), and its seven passes
over a slice run in cache rather than memory.

None changes a number: the same arithmetic runs on reused pages, the moments are the
zeros AdamW's first step would have made, and AdamW's update is element by element
(tests/train/test_allocation.py)."""

from __future__ import annotations

import torch
from torch.optim.adam import adam

from rlvr.models.lean.heap import keep_freed


def keep_freed_pages(device: torch.device | str = "cpu") -> bool:
    """On a CPU `device`, tell glibc's malloc to keep freed memory for reuse: no buffer from
    `mmap` (each one is faulted in afresh and returned when freed) and no trimming of the
    heap's free top. The process's resident memory then does not fall between steps.
    Returns whether it took effect (False for another device, off Linux or without glibc,
    where nothing is changed). Process-wide, and for the rest of the process; buffers
    allocated inside `rlvr.models.lean.heap.returned_when_freed` are returned all the
    same (the decode loop's packed weights)."""
    if torch.device(device).type != "cpu":
        return False
    return keep_freed()


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
    """The trainer's AdamW over `model`'s parameters (`SlicedAdamW`: torch's numbers); on a
    CPU in a single process (no sharded or replicated state to place) with its state
    allocated now."""
    optimizer = SlicedAdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return allocate_adamw_state(optimizer) if on_cpu and not distributed else optimizer


SLICE = 1 << 18
"""Elements per slice of `SlicedAdamW` (1 MiB of float32 per tensor: a slice's parameter,
gradient, moments and temporaries stay in cache). Measured on SmolLM2-135M's 134.5 M
parameters, one thread, AVX-512 EPYC: 0.23 s a step against torch's 0.43 s; 2¹⁴ elements
0.50 s (Python's per-call cost), 2²⁰ and 2²² 0.32 and 0.25 s."""


class SlicedAdamW(torch.optim.AdamW):
    """torch's AdamW, whose single-tensor update on a CPU is applied `SLICE` elements of a
    tensor at a time: parameter, gradient and moments are viewed flat and each slice goes
    through torch's own `adam` function with the same step count, hyper-parameters and
    state. AdamW's update is element-wise (decoupled decay, the moments' lerp and
    addcmul, √v̂ + ε, the addcdiv), so every float is the one torch computes for the whole
    tensor (tests/train/test_allocation.py), while the temporaries (√v / √(1 − β₂ᵗ) + ε)
    are one slice's. A group that torch would step another way (foreach, fused,
    capturable, differentiable, complex or non-CPU tensors) is stepped by torch."""

    def __init__(self, params, *args, slice_elements: int = SLICE, **kwargs) -> None:
        if slice_elements < 1:
            raise ValueError(f"slice_elements must be ≥ 1, got {slice_elements}")
        super().__init__(params, *args, **kwargs)
        self.slice_elements = slice_elements

    @torch.no_grad()
    def step(self, closure=None):
        if not all(map(_sliceable, self.param_groups)):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, avgs, squares, maxima, steps = [], [], [], [], [], []
            self._init_group(group, params, grads, avgs, squares, maxima, steps)
            for i, param in enumerate(params):
                tensors = [param, grads[i], avgs[i], squares[i]] + ([maxima[i]] if maxima else [])
                self._step_in_slices(group, tensors, steps[i])
        return loss

    def _step_in_slices(self, group: dict, tensors: list[torch.Tensor], step: torch.Tensor):
        """One parameter's update, slice by slice; its step count advances once."""
        contiguous = all(t.is_contiguous() and t.layout == torch.strided for t in tensors)
        flat = [t.view(-1) if contiguous else t for t in tensors]
        size = flat[0].numel() if contiguous else 0
        bounds = range(0, size, self.slice_elements) if size > self.slice_elements else [None]
        for start in bounds:
            piece = [t if start is None else t[start : start + self.slice_elements] for t in flat]
            count = step if start is None else step.clone()  # `adam` adds 1 to it
            adam(
                *[[t] for t in piece[:4]],
                piece[4:],
                [count],
                foreach=False,
                amsgrad=group["amsgrad"],
                beta1=group["betas"][0],
                beta2=group["betas"][1],
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
                decoupled_weight_decay=group["decoupled_weight_decay"],
            )
        if bounds[0] is not None:
            step += 1


def _sliceable(group: dict) -> bool:
    """Whether torch steps `group` with its single-tensor loop on real CPU tensors."""
    modes = ("foreach", "fused", "capturable", "differentiable")
    return not any(group.get(mode) for mode in modes) and all(
        p.device.type == "cpu" and not torch.is_complex(p) for p in group["params"]
    )
