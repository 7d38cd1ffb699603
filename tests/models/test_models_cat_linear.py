"""The fused Llama forward's concatenated projections (`rlvr.models.lean.CatLinear`): the
q/k/v and gate/up weights are concatenated per product, not kept concatenated from the
forward to the backward; log-probs and every gradient stay autograd's through
`F.linear(x, torch.cat(ws), b)` bit for bit, and `memory_budget` no longer counts a copy."""

import pytest
import torch
import torch.nn.functional as F
from test_models_fused_llama import PAD, batch, llama_gqa, qwen2
from test_models_fused_llama_lora import with_lora
from test_models_swiglu import saved_bytes

from rlvr.models import fused_llama, response_logprobs
from rlvr.models.lean import CatLinear


def concatenated(x, bias, *weights):
    """What `CatLinear` replaces: autograd keeps the concatenation for the backward."""
    return F.linear(x, torch.cat(weights), bias)


def unfused(x, norm_weight, eps, w, b, low):
    """`NormedCatLinear`'s composition, `rms_norm` then `_project` (whose products go
    through `CatLinear.apply`), each looked up when called so that a test may patch them."""
    return fused_llama._project(fused_llama.rms_norm(x, norm_weight, eps), w, b, low)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(7, 4, 32), (1, 1, 32), (5, 32)])
def test_the_function_equals_the_concatenation_bit_for_bit(bias, shape):
    torch.manual_seed(0)
    weights = [torch.randn(n, 32, requires_grad=True) for n in (32, 16, 16)]
    b = torch.randn(64, requires_grad=True) if bias else None
    x0, grad = torch.randn(*shape), torch.randn(*shape[:-1], 64)
    results = []
    for linear in (concatenated, CatLinear.apply):
        x = x0.clone().requires_grad_()
        for t in [*weights, b]:
            if t is not None:
                t.grad = None
        out = linear(x, b, *weights)
        out.backward(grad)
        kept = [x.grad, *(w.grad for w in weights)] + ([b.grad] if bias else [])
        results.append((out.detach(), *kept))
    for want, got in zip(*results, strict=True):
        assert torch.equal(got, want) and want.abs().max() > 0


def test_frozen_weights_get_no_gradient():
    """LoRA's base weights do not train: only the input's gradient is made."""
    weights = [torch.randn(n, 8) for n in (8, 4)]
    x = torch.randn(3, 8, requires_grad=True)
    CatLinear.apply(x, None, *weights).sum().backward()
    assert torch.equal(x.grad, torch.ones(3, 12) @ torch.cat(weights))
    assert all(w.grad is None for w in weights)


def logprobs_and_grads(model):
    prompts, ids, mask = batch()
    model.zero_grad()
    logprobs = response_logprobs(model, prompts, ids, mask, PAD)
    (logprobs * torch.linspace(-1, 1, 7)[:, None] * mask).sum().backward()
    return logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_training_forward_is_the_concatenations_bit_for_bit(build, lora, monkeypatch):
    """qwen2 has q/k/v biases (concatenated beside the weights), llama_gqa none."""
    model = with_lora(build()) if lora else build()
    monkeypatch.setattr(fused_llama, "_normed_project", unfused)  # CatLinear alone
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama.CatLinear, "apply", concatenated)
        want, want_grads = logprobs_and_grads(model)
    calls = []
    apply = fused_llama.CatLinear.apply
    monkeypatch.setattr(fused_llama.CatLinear, "apply", lambda *a: calls.append(1) or apply(*a))
    got, got_grads = logprobs_and_grads(model)
    # q/k/v and gate/up, in every layer, for the prompts' forward and the responses'.
    assert len(calls) == 2 * 2 * model.config.num_hidden_layers
    assert torch.equal(got, want)
    assert len(got_grads) == len(want_grads) and all(g.abs().max() > 0 for g in want_grads)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)


def test_no_concatenated_copy_is_kept_for_the_backward(monkeypatch):
    """llama_gqa: hidden 32, 4 query heads and 2 key-value heads of 8, I 64, 2 layers. The
    concatenations autograd kept were q/k/v (32 + 2·16 = 64 rows of 32) and gate/up (2·64
    rows of 32): 6,144 floats a layer, 12,288 in all, 49,152 bytes; nothing else changes."""
    model = llama_gqa()
    monkeypatch.setattr(fused_llama, "_normed_project", unfused)  # CatLinear alone
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama.CatLinear, "apply", concatenated)
        before = saved_bytes(model, *batch())
    assert before - saved_bytes(model, *batch()) == 4 * 2 * (64 * 32 + 2 * 64 * 32)


def test_the_budget_counts_only_a_bf16_cast():
    """In float32 no copy is held; under bf16 autocast each of the 7 projections is cast
    once: q 32·32, k and v 16·32 each, o 32·32, gate, up and down 64·32 each = 9,216
    weights a layer, 18,432 in 2 layers, at 2 bytes: 9,216 floats of 4 bytes."""
    model = llama_gqa()
    assert fused_llama.fused_copy_floats(model) == 0
    assert fused_llama.fused_copy_floats(model, "bf16") == 9_216
    model.model.gradient_checkpointing = True  # its own forward: nothing fused
    assert fused_llama.fused_copy_floats(model, "bf16") == 0
