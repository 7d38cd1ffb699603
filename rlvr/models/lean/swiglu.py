"""SwiGLU's gate with SiLU(g) recomputed in the backward instead of kept, and the gate with
the down projection after it, SiLU(g) ⊙ u recomputed too."""

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


class SwiGLUDown(torch.autograd.Function):
    """The MLP's gate and down projection, y = (SiLU(g) ⊙ u)·Wᵀ with a bias-free W, keeping
    g, u (views of the fused gate/up output) and W for the backward and recomputing
    a = SiLU(g) ⊙ u there. `SwiGLU` then `F.linear` keep a as well, for the product's
    weight gradient: one I-sized activation per token and layer more (135 MB of
    SmolLM2-135M's 30 layers in a 32-row, 24-token step, more than any other but the
    gate/up output). The backward runs the products autograd runs for `F.linear` over
    (..., I) rows,

        ∂L/∂a = g·W,    ∂L/∂W = gᵀ·a,

    then `SwiGLU`'s backward with ∂L/∂a, so every gradient is the two Functions' bit for
    bit (tests/models/test_models_swiglu.py)."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        return F.linear(F.silu(gate) * up, weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        gate, up, weight = ctx.saved_tensors
        silu = F.silu(gate)
        rows = grad.reshape(-1, grad.shape[-1])
        d_gate = d_up = d_weight = None
        if ctx.needs_input_grad[2]:
            product = silu * up
            d_weight = rows.t().mm(product.reshape(-1, product.shape[-1]))
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            d_product = rows.mm(weight).view(gate.shape)
            if ctx.needs_input_grad[0]:
                d_gate = torch.ops.aten.silu_backward(d_product * up, gate)
            if ctx.needs_input_grad[1]:
                d_up = d_product * silu
        return d_gate, d_up, d_weight
