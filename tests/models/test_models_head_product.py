"""The LM head's products over slices of the vocabulary on a CPU (`head_product`): the
floats of one product, bit for bit, at SmolLM2's size (V = 49,152, H = 576) and at a
tiny one with a slice that leaves a remainder; the weight gradient's per-chunk buffer is
one slice's; the sampler's head (`lm_head_logits` without a gradient) takes them, a
product with a gradient through it does not."""

import pytest
import torch
import torch.nn.functional as F

from rlvr.models import build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models import logprobs as lp
from rlvr.models.lean import head_product
from rlvr.models.lean.head_product import add_weight_grad, head_logits

SMOLLM2 = (49152, 576)


def _weight(vocab, hidden, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(vocab, hidden, generator=generator) * 0.05


@pytest.mark.parametrize(
    ("shape", "rows", "vocab_slice", "bias"),
    [
        (SMOLLM2, 32, 1024, False),  # a decode step's 32 rows
        (SMOLLM2, 341, 1024, False),  # a chunk of the trainer's head (CHUNK_VALUES // V)
        (SMOLLM2, 7, 1024, True),
        ((2100, 16), 5, 1024, False),  # slices of 1024 and 1076
        ((2100, 16), 5, 1024, True),
    ],
)
def test_logits_are_one_products_bit_for_bit(monkeypatch, shape, rows, vocab_slice, bias):
    monkeypatch.setattr(head_product, "SLICE", vocab_slice)
    weight = _weight(*shape)
    b = torch.randn(shape[0]) if bias else None
    # A strided view, as the sampler's last position of (B, T, H) hidden states is.
    h = torch.randn(rows, 3, shape[1])[:, -1]
    out = torch.empty(rows, shape[0])
    assert head_logits(h, weight, b, out) is out
    assert torch.equal(out, F.linear(h, weight, b))
    assert out.abs().max() > 0


@pytest.mark.parametrize(
    ("shape", "rows", "vocab_slice"),
    [(SMOLLM2, 341, 1024), ((2100, 16), 5, 1024), ((40, 16), 2, 12)],
)
def test_weight_gradient_is_one_products_bit_for_bit(monkeypatch, shape, rows, vocab_slice):
    """dzᵀ·h alone (the last chunk's, the backward's first) and added to the sum of the
    chunks after it: each element one product's element plus one addition."""
    monkeypatch.setattr(head_product, "SLICE", vocab_slice)
    dz, h = torch.randn(rows, shape[0]) * 1e-3, torch.randn(rows, shape[1])
    assert torch.equal(add_weight_grad(None, dz, h), dz.t().mm(h))
    total = _weight(*shape, seed=1)
    expected = total + dz.t().mm(h)
    assert add_weight_grad(total, dz, h) is total
    assert torch.equal(total, expected)


def test_the_weight_gradients_buffer_is_one_slice(monkeypatch):
    """V = 20 in slices of 7, the last taking the remainder: every product writes into a
    buffer of one slice's rows when adding to a sum (the (V, H) buffer it replaces was
    113 MB at SmolLM2's size), and into the new gradient itself when there is no sum
    yet."""
    monkeypatch.setattr(head_product, "SLICE", 7)
    written = []
    mm = torch.mm

    def recorded(a, b, out):
        written.append(tuple(out.shape))
        return mm(a, b, out=out)

    monkeypatch.setattr(head_product.torch, "mm", recorded)
    dz, h = torch.randn(5, 20), torch.randn(5, 16)
    first = add_weight_grad(None, dz, h)
    assert written == [(7, 16), (13, 16)]
    written.clear()
    add_weight_grad(first, dz, h)
    assert written == [(7, 16), (13, 16)]


def test_slices_of_the_vocabulary():
    """1024 rows at a time, the last slice taking the remainder (MKL multiplies a slice of
    at most 11 rows with other kernels, whose floats differ: no slice is narrower than
    1024); one slice below 2048 rows and off a CPU."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def bounds(vocab, device=cpu):
        return [(s.start, s.stop) for s in head_product._slices(vocab, device)]

    assert bounds(3075) == [(0, 1024), (1024, 2048), (2048, 3075)]
    assert bounds(3072) == [(0, 1024), (1024, 2048), (2048, 3072)]
    assert bounds(2047) == [(0, 2047)]
    assert bounds(20) == [(0, 20)]
    assert bounds(3075, cuda) == [(0, 3075)]


class _Model(torch.nn.Module):
    def __init__(self, head):
        super().__init__()
        self.head = head
        self.config = object()

    def get_output_embeddings(self):
        return self.head


def test_the_samplers_head_takes_the_slices_and_a_gradient_does_not(monkeypatch):
    calls = []
    sliced = lp.head_logits
    monkeypatch.setattr(lp, "head_logits", lambda *a: calls.append(1) or sliced(*a))
    head = torch.nn.Linear(16, 2100)  # slices of 1024 and 1076
    model = _Model(head)
    hidden = torch.randn(2, 3, 16)
    with torch.no_grad():  # the sampler's decode step
        for fp32_head in (False, True):
            logits = lp.lm_head_logits(model, hidden, fp32_head)
            assert torch.equal(logits, head(hidden)) and logits.shape == (2, 3, 2100)
    assert calls == [1, 1]
    # Off a CPU (here the meta device): F.linear, one product, as before.
    meta = _Model(torch.nn.Linear(16, 2100, device="meta"))
    with torch.no_grad():
        assert lp.lm_head_logits(meta, torch.empty(2, 16, device="meta"), False).shape == (2, 2100)
    assert calls == [1, 1]
    # With a gradient through the head (the checkpointed path): F.linear, differentiable.
    hidden.requires_grad_(True)
    lp.lm_head_logits(model, hidden, False).sum().backward()
    assert calls == [1, 1] and hidden.grad is not None and head.weight.grad is not None
    # Under bf16 autocast without an FP32 head the product is autocast's: the module's.
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert lp.lm_head_logits(model, hidden, False).dtype == torch.float32
        assert torch.equal(lp.lm_head_logits(model, hidden, False), head(hidden).float())
    assert calls == [1, 1]


@pytest.mark.parametrize("head_trains", [True, False])
def test_a_policy_with_2100_tokens_equals_the_checkpointed_head(monkeypatch, head_trains):
    """A tiny policy whose head (V = 2100: slices of 1024 and 1076) runs over chunks of 7
    positions: the trained head's (a full fine-tune's) log-probs, entropies and every
    gradient, and the frozen head's (LoRA's) log-probs and entropies, equal the
    checkpointed path's, whose products are F.linear's over the whole vocabulary."""
    vocab = 2100
    monkeypatch.setattr(lp, "CHUNK_VALUES", 7 * vocab)
    config = tiny_qwen2_config(vocab_size=vocab, hidden=32, layers=2, heads=2, kv_heads=1)
    config.tie_word_embeddings = head_trains
    model = build_tiny_policy(config, seed=0)
    model.lm_head.weight.requires_grad_(head_trains)
    applies = "trained_head_applies" if head_trains else "frozen_head_applies"
    assert getattr(lp, applies)(model, torch.ones(1, requires_grad=True), False, False)

    def forward_backward():
        torch.manual_seed(1)
        response_ids = torch.randint(2, vocab, (6, 5))
        model.zero_grad()
        logprob, entropy = response_logprobs(
            model, [[5, 6, 7], [8, 9]] * 3, response_ids, torch.ones(6, 5), 0,
            temperature=0.7, return_entropy=True, entropy_grad=False,
        )  # fmt: skip
        (logprob * torch.linspace(-1, 2, logprob.numel()).view(logprob.shape)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprob.detach(), entropy, grads

    sliced = forward_backward()
    monkeypatch.setattr(lp, applies, lambda *a: False)
    whole = forward_backward()
    assert torch.equal(sliced[0], whole[0]) and torch.equal(sliced[1], whole[1])
    if head_trains:
        assert "model.embed_tokens.weight" in whole[2]
        for name, grad in whole[2].items():
            assert torch.equal(sliced[2][name], grad), name
            assert grad.abs().max() > 0, name
