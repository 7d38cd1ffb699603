"""A linear map by concatenated weights, without keeping the concatenation."""

from __future__ import annotations

import torch


class CatLinear(torch.autograd.Function):
    """y = x·cat(W₁, …, W_k)ᵀ + b: the fused Llama forward's q/k/v and gate/up projections
    (`rlvr.models.fused_llama`), with the concatenated weight made for the product and
    dropped, and made again in the backward, instead of kept from the forward to the
    backward. The gradients are autograd's through `F.linear(x, torch.cat(ws), b)`:

        ∂L/∂x = g·W,    ∂L/∂W = gᵀ·x (split back into W₁ … W_k by rows),    ∂L/∂b = Σ g,

    from the same products and sum (tests/models/test_models_cat_linear.py). Autograd
    would keep the concatenation, a copy of every fused projection (0.28 GB on
    SmolLM2-135M, all 30 layers' at once) from the forward to the backward; this keeps
    the weights themselves and makes one layer's copy at a time, at the price of copying
    them twice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, bias: torch.Tensor | None, *weights: torch.Tensor):
        ctx.save_for_backward(x, *weights)
        ctx.has_bias = bias is not None
        return cat_product(x, bias, weights)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, *weights = ctx.saved_tensors
        need = ctx.needs_input_grad
        return cat_product_grads(grad, x, weights, need[0], ctx.has_bias and need[1], need[2:])


def cat_product(x: torch.Tensor, bias: torch.Tensor | None, weights) -> torch.Tensor:
    """x·cat(weights)ᵀ + b: F.linear's own products (addmm with a bias, mm without) over x's
    rows, written into an output of x's shape: no view of a tensor made here, so the
    caller may add to it in place (`_project`'s LoRA term)."""
    w = torch.cat(weights)
    out = x.new_empty(*x.shape[:-1], w.shape[0])
    rows, out_rows = x.reshape(-1, x.shape[-1]), out.view(-1, w.shape[0])
    if bias is None:
        torch.mm(rows, w.t(), out=out_rows)
    else:
        torch.addmm(bias, rows, w.t(), out=out_rows)
    return out


def cat_product_grads(grad, x, weights, need_x: bool, need_bias: bool, need_weights):
    """(∂L/∂x, ∂L/∂b, ∂L/∂W₁ … ∂L/∂W_k) of `cat_product` from ∂L/∂y, each None where not
    needed: autograd's products for F.linear over the concatenation."""
    rows = grad.reshape(-1, grad.shape[-1])
    d_x = rows.mm(torch.cat(weights)).view(x.shape) if need_x else None
    d_bias = rows.sum(0) if need_bias else None
    d_weights = [None] * len(weights)
    if any(need_weights):
        d_cat = rows.t().mm(x.reshape(-1, x.shape[-1]))
        parts = d_cat.split([w.shape[0] for w in weights])
        d_weights = [d if need else None for d, need in zip(parts, need_weights, strict=True)]
    return d_x, d_bias, *d_weights
