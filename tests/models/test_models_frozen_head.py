"""The LM head of a policy whose head does not train (LoRA): log-probs with the gradient
for the hidden states computed in the forward (`FrozenHeadLogprobs`), two products with
the head's weight instead of three, the same numbers as autograd's."""

import pytest
import torch
from rounding_testlib import forward_terms, reorder_atol
from torch.utils._python_dispatch import TorchDispatchMode

from rlvr.models import build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models import logprobs as lp

PAD = 0
VOCAB = 20


def no_processing(logits):
    """A model's logit processing where it has none."""
    return logits


def test_gradient_of_a_log_prob_by_hand():
    # W rows e₁, e₂, e₁+e₂; h = 0: every logit 0, p = (⅓, ⅓, ⅓), log π(0) = −log 3.
    # ∂ log π(0)/∂h = (W₀ − pᵀW)/T = ((1, 0) − (⅔, ⅔)) / 0.5 = (⅔, −4⁄3); an upstream
    # gradient of 3 makes it (2, −4).
    head = torch.nn.Linear(2, 3, bias=False)
    head.weight.data = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    head.weight.requires_grad_(False)
    hidden = torch.zeros(1, 2, requires_grad=True)
    (logprob,) = lp.FrozenHeadLogprobs.apply(
        hidden, torch.tensor([0]), head, no_processing, 0.5, False, 1
    )
    torch.testing.assert_close(logprob, torch.tensor([-torch.tensor(3.0).log()]))
    (3 * logprob).sum().backward()
    torch.testing.assert_close(hidden.grad, torch.tensor([[2.0, -4.0]]))


def _frozen_head_model():
    """A tiny policy whose head (untied) does not train, as LoRA leaves it."""
    config = tiny_qwen2_config(vocab_size=VOCAB, hidden=32, layers=2, heads=2, kv_heads=1)
    config.tie_word_embeddings = False
    model = build_tiny_policy(config, seed=0)
    model.get_output_embeddings().weight.requires_grad_(False)
    return model, config


def logprobs_entropy_and_grads(model, temperature=0.7, rows=8, bf16=False):
    """As the trainer's micro-step: the forward (under bf16 autocast with `bf16`), then
    the backward outside autocast."""
    torch.manual_seed(1)
    response_ids = torch.randint(2, VOCAB, (rows, 6))
    response_mask = torch.ones(rows, 6)
    response_mask[1, 4:] = 0
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logprob, entropy = response_logprobs(
            model,
            [[5, 6, 7], [8, 9]] * (rows // 2),
            response_ids,
            response_mask,
            PAD,
            temperature=temperature,
            return_entropy=True,
            entropy_grad=False,
        )
    (logprob * torch.linspace(-1, 2, logprob.numel()).view(logprob.shape)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logprob.detach(), entropy, grads


class HeadProducts(TorchDispatchMode):
    """Counts the matrix products with the head's weight: an operand with a dimension of
    the vocabulary's size (no other tensor of the tiny model has one)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.count += any(VOCAB in t.shape for t in tensors)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("chunk_values", [300, 60])
def test_equals_autograd_through_the_checkpointed_head(monkeypatch, chunk_values):
    """48 positions in chunks of 15 (300 logits) and of 3 (60): the log-probs and entropies
    are the checkpointed path's bit for bit (the same products and reductions), every
    trained parameter's gradient equal within the float reordering of one more sum over
    the vocabulary and the positions."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", chunk_values)
    model, config = _frozen_head_model()
    assert lp.frozen_head_applies(model, torch.ones(1, requires_grad=True), False, False)
    fast = logprobs_entropy_and_grads(model)
    monkeypatch.setattr(lp, "frozen_head_applies", lambda *a: False)
    slow = logprobs_entropy_and_grads(model)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    assert fast[2].keys() == slow[2].keys() and "lm_head.weight" not in fast[2]
    # A gradient element sums one term per position (48) and the head's V terms on top of
    # the forward's chain (rounding_testlib.py); M = the largest |gradient| of the tensor.
    terms = 8 * 6 + VOCAB + forward_terms(config)
    for name, grad in slow[2].items():
        atol = reorder_atol(terms, grad.abs().max().item())
        torch.testing.assert_close(fast[2][name], grad, atol=atol, rtol=0, msg=name)
        assert grad.abs().max() > 0, name  # the comparison is not between zeros


def test_two_products_with_the_head_instead_of_three(monkeypatch):
    """Chunks of 3 positions, 16 chunks: autograd with checkpointing runs the head's
    product three times per chunk (logits, logits again in the backward, dz·W), the frozen
    head twice (logits, pᵀW) and none in the backward."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    model, _ = _frozen_head_model()
    counts = []
    for applies in (lp.frozen_head_applies, lambda *a: False):
        monkeypatch.setattr(lp, "frozen_head_applies", applies)
        with HeadProducts() as spy:
            logprobs_entropy_and_grads(model)
        counts.append(spy.count)
    chunks = 16
    # The entropy (logged, no gradient) is computed from each chunk's logits: no product.
    assert counts == [2 * chunks, 3 * chunks]


def test_a_head_small_enough_for_one_chunk_keeps_autograd(monkeypatch):
    """Whole logits (960 values within the default chunk) have no recompute to save: the
    path, and so every number of a small-vocabulary LoRA run, stays autograd's."""
    model, _ = _frozen_head_model()
    calls = []
    monkeypatch.setattr(lp.FrozenHeadLogprobs, "apply", lambda *a: calls.append(a))
    logprobs_entropy_and_grads(model)
    assert calls == []
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    with pytest.raises(TypeError):  # the spy returns None: the path was taken
        logprobs_entropy_and_grads(model)
    assert len(calls) == 1


def test_a_head_that_trains_or_an_entropy_gradient_takes_autograd():
    model, _ = _frozen_head_model()
    hidden = torch.ones(1, requires_grad=True)
    assert not lp.frozen_head_applies(model, hidden, False, entropy_grad=True)
    assert not lp.frozen_head_applies(model, torch.ones(1), False, False)  # no gradient wanted
    with torch.no_grad():
        assert not lp.frozen_head_applies(model, hidden, False, False)
    model.get_output_embeddings().weight.requires_grad_(True)
    assert not lp.frozen_head_applies(model, hidden, False, False)
    _, _, grads = logprobs_entropy_and_grads(model)
    assert grads["lm_head.weight"].abs().max() > 0  # the full fine-tune's head still learns
    model.get_output_embeddings().weight.requires_grad_(False)
    model.config.final_logit_softcapping = 30.0  # Gemma's cap: a gradient the formula lacks
    assert not lp.frozen_head_applies(model, hidden, False, False)
    del model.config.final_logit_softcapping
    assert lp.frozen_head_applies(model, hidden, False, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 logits unless fp32_head
        assert not lp.frozen_head_applies(model, hidden, False, False)
