"""RMSNorm and the concatenated projection after it, with the normalized input recomputed
in the backward instead of kept."""

from __future__ import annotations

import torch

from rlvr.models.lean.cat_linear import cat_product, cat_product_grads
from rlvr.models.lean.rms_norm import rms_norm_grads, rms_scale


class NormedCatLinear(torch.autograd.Function):
    """y = (w ⊙ x·r)·cat(W₁, …, W_k)ᵀ + b, r = 1 / √(mean(x²) + ε): the fused Llama
    forward's norm before q/k/v and before gate/up, with its projection, in a float32
    training forward (`rlvr.models.fused_llama`). It keeps x, r, w and the weights and
    recomputes x̂ = w ⊙ x·r in the backward; `RMSNorm` then `CatLinear` keep x̂ too, as
    the projection's input: one hidden-size activation per token and norm, two a layer
    (100 MB of SmolLM2-135M's 30 layers at 32 rows × 24 tokens). The backward is
    `CatLinear`'s with x̂ recomputed (the same floats), then `RMSNorm`'s with the gradient
    it returns; `x` comes in twice, as `RMSNorm` takes it, so every gradient is the two
    Functions' bit for bit (tests/models/test_models_normed_linear.py)."""

    @staticmethod
    def forward(ctx, x, same_x, norm_weight, eps, bias, *weights):
        r = rms_scale(x, eps)
        ctx.save_for_backward(x, r, norm_weight, *weights)
        ctx.has_bias = bias is not None
        return cat_product(norm_weight * (x * r), bias, weights)

    @staticmethod
    def backward(ctx, grad):
        x, r, norm_weight, *weights = ctx.saved_tensors
        need = ctx.needs_input_grad
        need_normed = any(need[:3])
        d_normed, d_bias, *d_weights = cat_product_grads(
            grad, norm_weight * (x * r), weights, need_normed, ctx.has_bias and need[4], need[5:]
        )
        d_product = d_mean_path = d_norm_weight = None
        if need_normed:
            d_product, d_mean_path, d_norm_weight = rms_norm_grads(
                d_normed, x, r, norm_weight, need[2]
            )
        return d_product, d_mean_path, d_norm_weight, None, d_bias, *d_weights
