"""RMSNorm with its normalized input recomputed in the backward instead of kept."""

from __future__ import annotations

import torch


class RMSNorm(torch.autograd.Function):
    """RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467) of float32 x with weight w,

        y = w ⊙ x̂,    x̂ = x · r,    r = 1 / √(mean(x²) + ε),

    keeping x, r and w for the backward (x is kept anyway: it is the residual stream's)
    and recomputing x̂ there. Autograd through those ops also keeps x̂ for the product with
    w: one hidden-size activation per token and norm, two a layer (on SmolLM2-135M 2·576
    of the roughly 10 thousand floats a layer keeps per token). The backward runs the ops
    autograd runs for that composition:

        ∂L/∂w = Σ g ⊙ x̂,    ∂L/∂x̂ = g ⊙ w,    ∂L/∂x = ∂L/∂x̂ · r  +  2x · (∂L/∂m) / n,
        ∂L/∂m = −½ · (Σ ∂L/∂x̂ ⊙ x) · r³,

    and `x` comes in twice, as `norm(x, x, w, eps)`: the first copy gets the product's
    term, the second the mean's, which autograd then adds to x's gradient one after the
    other, after the residual stream's, as it adds them for the plain ops; so the
    gradients are theirs bit for bit (tests/models/test_models_rms_norm.py)."""

    @staticmethod
    def forward(ctx, x, same_x, weight, eps):
        r = rms_scale(x, eps)
        ctx.save_for_backward(x, r, weight)
        return weight * (x * r)

    @staticmethod
    def backward(ctx, grad):
        x, r, weight = ctx.saved_tensors
        return *rms_norm_grads(grad, x, r, weight, ctx.needs_input_grad[2]), None


def rms_scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """r = 1 / √(mean(x²) + ε) over the last dimension, kept as (..., 1)."""
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm_grads(grad, x, r, weight, need_weight: bool):
    """(∂L/∂x by the product, ∂L/∂x by the mean, ∂L/∂w) of y = w ⊙ x·r from ∂L/∂y: the ops
    autograd runs for the composition, in its order (`RMSNorm`)."""
    d_weight = (grad * (x * r)).sum_to_size(weight.shape) if need_weight else None
    d_normed = grad * weight
    d_product = d_normed * r
    d_r = (d_normed * x).sum(-1, keepdim=True)
    d_mean = -0.5 * d_r * r.pow(3)
    d_square = d_mean.expand(x.shape) / x.shape[-1]
    d_mean_path = d_square * (2 * x.pow(1))
    return d_product, d_mean_path, d_weight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in float32, as `Qwen2RMSNorm`/`LlamaRMSNorm`: through `RMSNorm` while autograd
    records over float32 x and w, the plain ops otherwise (no gradient, or another dtype)."""
    if torch.is_grad_enabled() and x.dtype == weight.dtype == torch.float32:
        return RMSNorm.apply(x, x, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
