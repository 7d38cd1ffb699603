"""Mixed precision (rlvr/models/precision.py): bf16 autocast over float32 master weights
agrees with float32 to bf16's tolerance in loss and gradient, the FP32 head's log-probs
are float32 products, and a bf16 copy synced from the master weights is their rounding."""

import pytest
import torch
import torch.nn.functional as F
from rounding_testlib import bf16_logprob_atol, reorder_atol

from rlvr.models import build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models.logprobs import lm_head_logits, response_hidden_states
from rlvr.models.precision import (
    autocast,
    bf16_supported,
    copy_weights,
    low_precision_copy,
)

pytestmark = pytest.mark.skipif(not bf16_supported("cpu"), reason="no native bf16 on this CPU")
PAD = 0
BF16_EPS = 2.0**-8  # bf16 keeps 8 bits of mantissa: relative rounding ≤ 2^-9, spacing 2^-8


def policy(seed: int = 0):
    config = tiny_qwen2_config(vocab_size=40, hidden=64, layers=2, heads=4, kv_heads=2)
    return build_tiny_policy(config, seed=seed).eval()


def batch():
    g = torch.Generator().manual_seed(1)
    prompt_ids = [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]  # two groups sharing a prompt
    response_ids = torch.randint(2, 40, (4, 6), generator=g)
    response_mask = torch.ones(4, 6)
    response_mask[1, 4:] = 0
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 6)
    return prompt_ids, response_ids, response_mask, advantages


def loss_and_grad(model, precision: str, fp32_head: bool = True):
    """A GRPO-style surrogate −Σ A·π/π_old over the mask / tokens, π_old the float32
    forward: its value and the flattened gradient of every parameter."""
    prompt_ids, response_ids, mask, advantages = batch()
    with torch.no_grad():
        old = response_logprobs(model, prompt_ids, response_ids, mask, PAD)
    model.zero_grad()
    with autocast(precision, "cpu"):
        logprobs = response_logprobs(
            model, prompt_ids, response_ids, mask, PAD, fp32_head=fp32_head
        )
    assert logprobs.dtype == torch.float32  # the loss is float32 whatever the precision
    ratio = (logprobs - old).exp()
    loss = -(ratio * advantages * mask).sum() / mask.sum()
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g.dtype == torch.float32 for g in grads)  # gradients on the fp32 masters
    return loss.detach(), torch.cat([g.flatten() for g in grads])


def test_bf16_autocast_matches_fp32_loss_and_gradient_to_bf16_tolerance():
    model = policy()
    loss32, grad32 = loss_and_grad(model, "fp32")
    loss16, grad16 = loss_and_grad(model, "bf16")
    # The surrogate's value at π = π_old is −mean(A·mask) whatever the precision, up to
    # the ratio exp(log π − log π_old) ≠ 1 by bf16's error in log π: a few ulps.
    assert abs(loss16 - loss32) <= 8 * BF16_EPS * max(1.0, abs(float(loss32)))
    relative = float((grad16 - grad32).norm() / grad32.norm())
    cosine = float(F.cosine_similarity(grad16, grad32, dim=0))
    assert relative < 0.05 and cosine > 0.998, (relative, cosine)
    assert not torch.equal(grad16, grad32)  # bf16 really ran: the gradients differ


def test_fp32_head_logits_are_float32_products_inside_autocast():
    model = policy()
    hidden = torch.randn(5, 64)
    weight = model.get_output_embeddings().weight
    exact = hidden @ weight.t()  # float32, outside autocast
    with autocast("bf16", "cpu"):
        head32 = lm_head_logits(model, hidden, fp32_head=True)
        head16 = lm_head_logits(model, hidden, fp32_head=False)
    assert head32.dtype == head16.dtype == torch.float32
    # Two float32 products of length 64 that may add in other orders: 64·ε·Σ|h·w|.
    magnitude = (hidden.abs() @ weight.abs().t()).max().item()
    torch.testing.assert_close(head32, exact, rtol=0, atol=reorder_atol(64, magnitude))
    # Without the FP32 head the product is bf16: every logit is a bf16 number, and off
    # the float32 one by up to bf16's rounding.
    assert torch.equal(head16, head16.to(torch.bfloat16).float())
    assert not torch.equal(head16, exact)
    assert (head16 - exact).abs().max() <= 4 * BF16_EPS * exact.abs().max()


def test_fp32_head_logprobs_are_the_float32_log_softmax_of_the_bf16_backbone():
    """With fp32_head the log-probs are log_softmax of float32 logits computed from the
    backbone's (bf16) hidden states: equal to doing that by hand, to float32 rounding."""
    model = policy()
    prompt_ids, response_ids, mask, _ = batch()
    with torch.no_grad(), autocast("bf16", "cpu"):
        got = response_logprobs(model, prompt_ids, response_ids, mask, PAD, fp32_head=True)
        hidden = response_hidden_states(model.base_model, prompt_ids, response_ids, mask, PAD)
    logits = hidden.float() @ model.get_output_embeddings().weight.t()
    by_hand = logits.log_softmax(-1).gather(-1, response_ids[..., None])[..., 0] * mask
    # rlvr's fused backbone and the model's own forward both in bf16, and bf16 against
    # float32: a bf16 rounding per stage at most (rounding_testlib.bf16_logprob_atol).
    atol = bf16_logprob_atol(model.config)
    torch.testing.assert_close(got, by_hand, atol=atol, rtol=0)
    with torch.no_grad():
        fp32 = response_logprobs(model, prompt_ids, response_ids, mask, PAD)
    torch.testing.assert_close(got, fp32, atol=atol, rtol=0)
    assert not torch.equal(got, fp32)


def test_bf16_copy_after_sync_is_the_rounded_master_weights():
    model = policy()
    twin = low_precision_copy(model, torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():  # an update the copy has not seen
            p.add_(torch.randn_like(p) * 1e-2)
    stale = {n: p.clone() for n, p in twin.named_parameters()}
    copy_weights(model, twin)
    for (name, master), (_, copied) in zip(
        model.named_parameters(), twin.named_parameters(), strict=True
    ):
        assert master.dtype == torch.float32 and copied.dtype == torch.bfloat16
        assert torch.equal(copied, master.to(torch.bfloat16)), name  # round to nearest even
        assert not torch.equal(copied, stale[name]), name
    # Buffers keep their dtype: the rotary inverse frequencies stay float32.
    assert all(b.dtype == torch.float32 for b in twin.buffers() if b.is_floating_point())
    assert not any(p.requires_grad for p in twin.parameters())


def test_copy_weights_refuses_another_architecture():
    with pytest.raises(ValueError, match="does not match the policy"):
        copy_weights(policy(), build_tiny_policy(tiny_qwen2_config(40, 64, 1, 4, 2), 0))


def test_unknown_precision_is_named():
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, got 'fp16'"):
        autocast("fp16", "cpu")
