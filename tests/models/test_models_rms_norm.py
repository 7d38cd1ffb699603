"""The fused Llama forward's RMSNorm (`rlvr.models.lean.RMSNorm`) recomputes the normalized
input in the backward instead of keeping it: one hidden-size activation fewer per token
and norm, and the same log-probs and gradients as autograd through the plain ops, bit for
bit, in float32 and under bf16 autocast, for a full fine-tune and for LoRA."""

import pytest
import torch
from test_models_cat_linear import unfused
from test_models_fused_llama import PAD, batch, llama_gqa, qwen2
from test_models_fused_llama_lora import with_lora
from test_models_swiglu import saved_bytes

from rlvr.models import fused_llama, response_logprobs
from rlvr.models.lean import RMSNorm, rms_norm
from rlvr.models.precision import autocast, bf16_supported

needs_bf16 = pytest.mark.skipif(not bf16_supported("cpu"), reason="no native bf16 on this CPU")


def plain(x, weight, eps):
    """The composition `RMSNorm` replaces: autograd keeps x·r for the product with w."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def test_the_function_equals_the_composition_bit_for_bit():
    """Alone, x used once more after the norm (as the residual stream uses it): the value
    and the gradients of x and w are equal; with w frozen, no gradient for it."""
    torch.manual_seed(0)
    x0, w0 = torch.randn(3, 5, 16) * 3, torch.randn(16)
    grad, residual_grad = torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    results = []
    for norm in (plain, lambda x, w, eps: RMSNorm.apply(x, x, w, eps)):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = norm(x, w, 1e-6)
        (out * grad).sum().add((x * residual_grad).sum()).backward()
        results.append((out.detach(), x.grad, w.grad))
    for want, got in zip(*results, strict=True):
        assert torch.equal(got, want) and want.abs().max() > 0
    x = x0.clone().requires_grad_()
    RMSNorm.apply(x, x, w0, 1e-6).sum().backward()
    assert x.grad is not None and w0.grad is None


def test_without_a_gradient_the_plain_ops_run(monkeypatch):
    calls = []
    monkeypatch.setattr(RMSNorm, "apply", lambda *a: calls.append(a))
    x, w = torch.randn(2, 4), torch.randn(4)
    with torch.no_grad():
        torch.testing.assert_close(rms_norm(x, w, 1e-6), plain(x, w, 1e-6), rtol=0, atol=0)
    assert calls == []


def logprobs_and_grads(model, precision):
    prompts, ids, mask = batch()
    model.zero_grad()
    with autocast(precision, "cpu"):
        logprobs = response_logprobs(model, prompts, ids, mask, PAD)
    (logprobs * torch.linspace(-1, 1, 7)[:, None] * mask).sum().backward()
    return logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize(
    "precision", ["fp32", pytest.param("bf16", marks=needs_bf16)], ids=["fp32", "bf16"]
)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_training_forward_is_the_plain_ops_bit_for_bit(build, lora, precision, monkeypatch):
    model = with_lora(build()) if lora else build()
    monkeypatch.setattr(fused_llama, "_normed_project", unfused)  # RMSNorm alone
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama, "rms_norm", plain)
        want, want_grads = logprobs_and_grads(model, precision)
    calls = []
    apply = RMSNorm.apply
    monkeypatch.setattr(RMSNorm, "apply", lambda *a: calls.append(1) or apply(*a))
    got, got_grads = logprobs_and_grads(model, precision)
    # Two norms a layer and the final one, for the prompts' forward and the responses'.
    assert len(calls) == 2 * (2 * model.config.num_hidden_layers + 1)
    assert torch.equal(got, want)
    assert len(got_grads) == len(want_grads) and all(g.abs().max() > 0 for g in want_grads)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)


def test_one_hidden_size_activation_fewer_per_token_and_norm(monkeypatch):
    """batch() runs 40 tokens (12 of prompts, 28 of responses) through llama_gqa's 2 layers
    of 2 norms and its final norm: 5 norms × 40 tokens × H = 32 floats of 4 bytes each,
    25,600 bytes, fewer kept; nothing else changes."""
    model = llama_gqa()
    monkeypatch.setattr(fused_llama, "_normed_project", unfused)  # RMSNorm alone
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama, "rms_norm", plain)
        before = saved_bytes(model, *batch())
    assert before - saved_bytes(model, *batch()) == 5 * 40 * 32 * 4
