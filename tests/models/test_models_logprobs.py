"""The trainer's forward: padding-invariant, masked, differentiable, float32 head."""

import math

import pytest
import torch
from rounding_testlib import (
    RANDOM_LOGIT_SCALE,
    bf16_logprob_atol,
    forward_terms,
    logprob_atol,
    reorder_atol,
)

from rlvr.models import (
    build_tiny_policy,
    pack_prompt_response,
    response_logprobs,
    tiny_qwen2_config,
)

PAD = 0


@pytest.fixture(scope="module")
def model():
    config = tiny_qwen2_config(vocab_size=20, hidden=32, layers=2, heads=2, kv_heads=1)
    return build_tiny_policy(config, seed=0)


def batch():
    prompt_ids = [[5, 6, 7], [8], [9, 10]]
    response_ids = torch.tensor([[11, 12, 1], [13, 1, PAD], [14, 15, 16]])
    response_mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1]])
    return prompt_ids, response_ids, response_mask


def test_pack_layout_by_hand():
    ids, attention, starts = pack_prompt_response(*batch(), pad_id=PAD)
    # width = longest prompt (3) + T (3) = 6; responses start right after each prompt.
    assert ids.tolist() == [[5, 6, 7, 11, 12, 1], [8, 13, 1, 0, 0, 0], [9, 10, 14, 15, 16, 0]]
    assert attention.tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]
    assert starts.tolist() == [3, 1, 2]


def test_matches_unpadded_per_row_forward(model):
    prompt_ids, response_ids, response_mask = batch()
    got = response_logprobs(model, prompt_ids, response_ids, response_mask, PAD, temperature=0.7)
    for b, prompt in enumerate(prompt_ids):
        n = int(response_mask[b].sum())
        row = torch.tensor([prompt + response_ids[b, :n].tolist()])
        logits = model(row).logits[0, len(prompt) - 1 : -1].float() / 0.7  # predicts response
        expected = logits.log_softmax(-1).gather(-1, response_ids[b, :n, None])[:, 0]
        # A padded batch and one unpadded row add in other orders: τ / 0.7 (rounding_testlib)
        tau = logprob_atol(model.config) / 0.7
        torch.testing.assert_close(got[b, :n], expected, atol=tau, rtol=0)
        assert (got[b, n:] == 0).all()


def test_entropy_is_bounded_and_masked(model):
    lp, entropy = response_logprobs(model, *batch(), pad_id=PAD, return_entropy=True)
    assert lp.shape == entropy.shape == (3, 3)
    # H = logsumexp(z) − Σ p·z ≤ log 20 exactly; in float32 each sum of 20 terms rounds by
    # ≤ 20·ε of its terms' size (|z| ≤ RANDOM_LOGIT_SCALE): reorder_atol(2·20, M).
    slack = reorder_atol(2 * 20, RANDOM_LOGIT_SCALE)
    assert (entropy >= 0).all() and (entropy <= math.log(20) + slack).all()
    assert entropy[1, 2] == 0


def test_gradients_flow_to_every_parameter(model):
    model.zero_grad()
    lp = response_logprobs(model, *batch(), pad_id=PAD)
    lp.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    model.zero_grad()


def test_fp32_head_on_a_bf16_model(model):
    reference = response_logprobs(model, *batch(), pad_id=PAD)
    bf16 = build_tiny_policy(model.config, seed=0).to(torch.bfloat16)
    for fp32_head in (True, False):
        lp = response_logprobs(bf16, *batch(), pad_id=PAD, fp32_head=fp32_head)
        assert lp.dtype == torch.float32
        # bf16 weights and activations against float32: each stage rounds to bf16 at most
        # once more than the float32 model (rounding_testlib.bf16_logprob_atol: 0.44 here).
        atol = bf16_logprob_atol(model.config)
        torch.testing.assert_close(lp, reference, atol=atol, rtol=0)


def test_bad_inputs_speak():
    prompt_ids, response_ids, response_mask = batch()
    with pytest.raises(ValueError, match="2 prompts for 3 responses"):
        pack_prompt_response(prompt_ids[:2], response_ids, response_mask, PAD)
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(None, prompt_ids, response_ids, response_mask, PAD, temperature=0)


def test_pack_trims_columns_no_row_needs(model):
    prompt_ids, response_ids, response_mask = batch()
    # Two trailing response columns that no row fills: T = 5, every row ends by t = 2.
    wide_ids = torch.nn.functional.pad(response_ids, (0, 2), value=PAD)
    wide_mask = torch.nn.functional.pad(response_mask, (0, 2))
    ids, attention, _ = pack_prompt_response(prompt_ids, wide_ids, wide_mask, PAD)
    # width = max(3 + 3, 1 + 2, 2 + 3) = 6, not longest prompt 3 + T 5 = 8.
    assert ids.shape == (3, 6) and attention.tolist()[1] == [1, 1, 1, 0, 0, 0]
    got = response_logprobs(model, prompt_ids, wide_ids, wide_mask, PAD)
    narrow = response_logprobs(model, prompt_ids, response_ids, response_mask, PAD)
    # Other widths, other kernels: within τ (rounding_testlib.logprob_atol).
    torch.testing.assert_close(got[:, :3], narrow, atol=logprob_atol(model.config), rtol=0)
    assert (got[:, 3:] == 0).all()


def test_gathered_logprobs_and_chunked_entropy_equal_the_full_log_softmax(monkeypatch):
    from rlvr.models import logprobs as lp

    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 40) * 4).requires_grad_()
    targets = torch.randint(0, 40, (3, 5))
    full = logits.log_softmax(-1)
    expected_lp = full.gather(-1, targets[..., None])[..., 0]
    expected_h = -(full.exp() * full).sum(-1)
    monkeypatch.setattr(lp, "CHUNK_VALUES", 40 * 4)  # 4 positions per chunk: 15 = 4+4+4+3
    got_lp, got_h = lp.gathered_logprobs(logits, targets), lp.chunked_entropy(logits)
    # Each value (and its gradient) comes from sums over the 40 logits, |z| ≤ max|z|, added
    # in other orders chunked and whole: reorder_atol(40, max|z|) (rounding_testlib.py).
    atol = reorder_atol(40, logits.abs().max().item())
    torch.testing.assert_close(got_lp, expected_lp, atol=atol, rtol=0)
    torch.testing.assert_close(got_h, expected_h, atol=atol, rtol=0)
    (grad_got,) = torch.autograd.grad((got_lp.sum() + got_h.sum()), logits)
    (grad_exp,) = torch.autograd.grad((expected_lp.sum() + expected_h.sum()), logits)
    torch.testing.assert_close(grad_got, grad_exp, atol=atol, rtol=0)


def _vocab_sized_outputs(vocab, hidden):
    """A dispatch mode that records the largest tensor any op makes whose last dimension is
    the vocabulary (logits, softmax, their gradients), the head's (H, V) weight aside."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == vocab:
                    if t.shape == (hidden, vocab):  # the head's weight, transposed
                        continue
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    return Largest()


def _logprobs_entropy_and_grads(model, rows):
    prompt_ids = [[5, 6, 7], [8, 9]] * (rows // 2)
    response_ids, response_mask = _ids_and_mask(rows)
    model.zero_grad()
    lp, h = response_logprobs(
        model, prompt_ids, response_ids, response_mask, PAD, temperature=0.7, return_entropy=True
    )
    (lp.sum() + 0.3 * h.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return lp.detach(), h.detach(), grads


@pytest.mark.parametrize("tie", [True, False])
def test_chunked_head_equals_the_whole_head_and_never_holds_all_logits(monkeypatch, tie):
    """8 rows × 6 positions = 48 positions of V = 20 logits (960 values). With a budget of
    60 values the head runs in chunks of 3 positions, recomputed in backward: log-probs,
    entropy and every parameter's gradient equal the unchunked ones, and no tensor with
    the vocabulary as last dimension ever exceeds one chunk (3 × 20), in forward or backward."""
    from rlvr.models import logprobs as lp

    config = tiny_qwen2_config(vocab_size=20, hidden=32, layers=2, heads=2, kv_heads=1)
    config.tie_word_embeddings = tie
    model = build_tiny_policy(config, seed=0)
    spy = _vocab_sized_outputs(20, 32)
    with spy:
        whole = _logprobs_entropy_and_grads(model, 8)
    assert spy.numel == 8 * 6 * 20  # the whole logits, as before
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    spy = _vocab_sized_outputs(20, 32)
    with spy:
        chunked = _logprobs_entropy_and_grads(model, 8)
    assert spy.numel == 3 * 20
    # Chunks of 3 positions and the whole head add in other orders (rounding_testlib.py):
    # log-probs of logits / 0.7 within τ / 0.7, entropies within 2·H·τ / 0.7 ≤ 2·log 20·τ/0.7;
    # a gradient element sums one term per position (48) through the forward's chain of
    # additions, M = the tensor's largest |gradient|.
    tau = logprob_atol(config) / 0.7
    torch.testing.assert_close(chunked[0], whole[0], atol=tau, rtol=0)
    torch.testing.assert_close(chunked[1], whole[1], atol=2 * math.log(20) * tau, rtol=0)
    assert chunked[0][1, 4:].eq(0).all() and chunked[1][1, 4:].eq(0).all()
    terms = 8 * 6 + forward_terms(config)
    for name, grad in whole[2].items():
        atol = reorder_atol(terms, grad.abs().max().item())
        torch.testing.assert_close(chunked[2][name], grad, atol=atol, rtol=0, msg=name)
    with torch.no_grad():  # the reference and old-policy forwards: chunked, no recompute
        ref = response_logprobs(model, [[5, 6, 7], [8, 9]] * 4, *_ids_and_mask(8), PAD, 0.7)
    torch.testing.assert_close(ref, chunked[0], atol=tau, rtol=0)


def _ids_and_mask(rows):
    torch.manual_seed(1)
    response_ids = torch.randint(2, 20, (rows, 6))
    response_mask = torch.ones(rows, 6)
    response_mask[1, 4:] = 0
    return response_ids, response_mask
