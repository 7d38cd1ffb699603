"""The fused Llama forward's norm with the projection after it (`NormedCatLinear`): a
float32 full fine-tune keeps x, not the normed x, for q/k/v's and gate/up's backward;
the value and every gradient are `RMSNorm` then `CatLinear`'s bit for bit."""

import pytest
import torch
from test_models_cat_linear import logprobs_and_grads, unfused
from test_models_fused_llama import batch, llama_gqa, qwen2
from test_models_fused_llama_lora import with_lora
from test_models_swiglu import saved_bytes

from rlvr.models import fused_llama
from rlvr.models.lean import CatLinear, NormedCatLinear, RMSNorm


def composed(x, same_x, norm_weight, eps, bias, *weights):
    return CatLinear.apply(RMSNorm.apply(x, same_x, norm_weight, eps), bias, *weights)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("trained", ["all", "weights", "inputs"])
def test_the_function_equals_the_two_functions_bit_for_bit(bias, trained):
    """x also feeds the residual stream (its gradient is three terms, added in autograd's
    order); the norm's weight, the projections and the bias trained or not: the value and
    every gradient asked for are equal, none made that was not."""
    torch.manual_seed(0)
    x0, norm0 = torch.randn(3, 5, 16) * 3, torch.randn(16)
    weights0 = [torch.randn(n, 16) for n in (16, 8, 8)]
    bias0 = torch.randn(32) if bias else None
    grad, residual_grad = torch.randn(3, 5, 32), torch.randn(3, 5, 16)
    results = []
    for function in (composed, NormedCatLinear.apply):
        x = x0.clone().requires_grad_(trained != "weights")
        params = [t.clone() if t is not None else None for t in (norm0, *weights0, bias0)]
        for t in params:
            if t is not None:
                t.requires_grad_(trained != "inputs")
        out = function(x, x, params[0], 1e-6, params[-1], *params[1:-1])
        loss = (out * grad).sum() + ((x * residual_grad).sum() if x.requires_grad else 0)
        loss.backward()
        results.append((out.detach(), x.grad, *(t.grad for t in params if t is not None)))
    for want, got in zip(*results, strict=True):
        assert (want is None) == (got is None)
        assert want is None or (torch.equal(got, want) and want.abs().max() > 0)
    assert (results[1][1] is None) == (trained == "weights")
    assert all((g is None) == (trained == "inputs") for g in results[1][2:])


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_training_forward_is_the_two_functions_bit_for_bit(build, lora, monkeypatch):
    """qwen2 has q/k/v biases, llama_gqa none; LoRA's projections keep their own path."""
    model = with_lora(build()) if lora else build()
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama, "_normed_project", unfused)
        want, want_grads = logprobs_and_grads(model)
    calls = []
    apply = NormedCatLinear.apply
    monkeypatch.setattr(NormedCatLinear, "apply", lambda *a: calls.append(1) or apply(*a))
    got, got_grads = logprobs_and_grads(model)
    # q/k/v and gate/up in every layer, for the prompts' forward and the responses'.
    assert len(calls) == (0 if lora else 2 * 2 * model.config.num_hidden_layers)
    assert torch.equal(got, want)
    assert len(got_grads) == len(want_grads) and all(g.abs().max() > 0 for g in want_grads)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)


def test_the_normed_input_is_not_kept(monkeypatch):
    """batch() runs 40 tokens through llama_gqa's 2 layers, each with 2 norms before a
    projection: 4 × 40 tokens × H = 32 floats of 4 bytes, 20,480 bytes, fewer kept (the
    final norm, before the head, stays `RMSNorm`); nothing else changes."""
    model = llama_gqa()
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama, "_normed_project", unfused)
        before = saved_bytes(model, *batch())
    assert before - saved_bytes(model, *batch()) == 4 * 40 * 32 * 4
