"""SwiGLU's gate with SiLU(g) recomputed in the backward instead of kept."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class SwiGLU(torch.autograd.Function):
    """SwiGLU's gate (Shazeer 2020, arXiv:2002.05202), a = SiLU(g) ⊙ u with SiLU(g) = g·σ(g),
    keeping only g and u for the backward (views of the fused gate/up output: no storage of
    their own) and recomputing SiLU(g) there:

        ∂L/∂u = ∂L/∂a ⊙ SiLU(g),    ∂L/∂g = ∂L/∂a ⊙ u ⊙ σ(g)·(1 + g·(1 − σ(g)))

    Autograd through `F.silu(g) * u` also keeps SiLU(g), for the product's backward: one
    I-sized activation per token and layer more, the MLP keeping 4·I floats instead of 3·I
    (gate/up output and the product; on SmolLM2-135M I = 1536 in each of 30 layers). The
    backward runs the ops autograd runs for that composition (`mul`'s grad·other on each
    side, then `silu_backward`), so the gradients are its bit for bit
    (tests/models/test_models_swiglu.py)."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    @once_differentiable  # no double backward: silu's first-order formula, as autograd's
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        gate, up = ctx.saved_tensors
        d_gate = torch.ops.aten.silu_backward(grad * up, gate) if ctx.needs_input_grad[0] else None
        d_up = grad * F.silu(gate) if ctx.needs_input_grad[1] else None
        return d_gate, d_up


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) ⊙ up: through `SwiGLU` while autograd records, the plain ops otherwise
    (sampling and scoring keep nothing, and a decode step skips the Function's overhead)."""
    if torch.is_grad_enabled():
        return SwiGLU.apply(gate, up)
    return F.silu(gate) * up
