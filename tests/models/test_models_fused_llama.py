"""The shared-prefix training forward equals the model's own forward: the same per-token
log-probs and the same gradient, on Qwen2 (biased QKV) and a grouped-query Llama, with
groups sharing prompts, prompts of different lengths and ragged responses."""

import pytest
import torch
from rounding_testlib import forward_terms, logprob_atol, reorder_atol
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.models import build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models import logprobs as lp
from rlvr.models.fused_llama import _extend, shared_prefix_hidden

PAD = 0


def qwen2():
    return build_tiny_policy(tiny_qwen2_config(40, hidden=32, layers=2, heads=4, kv_heads=4), 0)


def llama_gqa(layers: int = 2):
    torch.manual_seed(1)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=40,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=None,
        )
    )


def batch():
    """Two groups of three rows (prompts of lengths 4 and 2) and a lone row; responses of
    T = 5 with ragged lengths (EOS = 1, then padding)."""
    torch.manual_seed(2)
    prompts = [[5, 6, 7, 8]] * 3 + [[9, 10]] * 3 + [[11, 12, 13]]
    lengths = torch.tensor([5, 2, 3, 1, 4, 5, 2])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).float()
    ids = torch.randint(2, 40, (7, 5)).masked_fill(mask == 0, PAD)
    return prompts, ids, mask


def per_row_reference(model, prompts, ids, mask, pad_id=PAD):
    """The model's own forward through `response_hidden_states` (the generic path)."""
    hidden = lp.response_hidden_states(model.base_model, prompts, ids, mask, pad_id)
    logits = lp.lm_head_logits(model, hidden, True)
    out = logits.log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    return torch.where(mask > 0, out, torch.zeros_like(out))


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_shared_prefix_logprobs_and_gradient_equal_the_models_forward(build):
    model = build()
    prompts, ids, mask = batch()
    advantages = torch.linspace(-1, 1, 7)[:, None]
    results = []
    for forward in (response_logprobs, per_row_reference):
        model.zero_grad()
        logprobs = forward(model, prompts, ids, mask, PAD)
        (logprobs * advantages * mask).sum().backward()
        results.append((logprobs.detach(), [p.grad.clone() for p in model.parameters()]))
    (fast, fast_grads), (ref, ref_grads) = results
    # The shared-prefix forward and one forward per row add in other orders: log-probs
    # within τ; a gradient element sums a term per response token through the forward's
    # chain of additions, M = the tensor's largest |gradient| (rounding_testlib.py).
    torch.testing.assert_close(fast, ref, atol=logprob_atol(model.config), rtol=0)
    assert (fast[mask == 0] == 0).all()
    terms = ids.numel() + forward_terms(model.config)
    for a, b in zip(fast_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=reorder_atol(terms, b.abs().max().item()), rtol=0)


def test_shared_prefix_runs_each_distinct_prompt_once(monkeypatch):
    model = qwen2()
    prompts, ids, mask = batch()
    seen = []
    real = torch.nn.Module.__call__

    def spy(module, *args, **kwargs):
        if module is model.base_model.embed_tokens:
            seen.append(tuple(args[0].shape))
        return real(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__call__", spy)
    shared_prefix_hidden(model, prompts, ids, mask, PAD)
    # 3 distinct prompts, longest 4: one (3, 4) prompt pass; then all 7 rows × 4 inputs.
    assert seen == [(3, 4), (7, 4)]


def test_all_rows_of_one_token():
    model = qwen2()
    prompts, ids, mask = batch()
    one = mask.clone()
    one[:, 1:] = 0
    got = response_logprobs(model, prompts, ids, one, PAD)
    tau = logprob_atol(model.config)  # shared prefix vs per row: rounding_testlib.py
    torch.testing.assert_close(got, per_row_reference(model, prompts, ids, one), atol=tau, rtol=0)


class _AtenOps(TorchDispatchMode):
    """Every aten op run inside the block (backward included), with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((str(func), args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def _accumulating_index_puts(calls) -> list[str]:
    """index_put_ calls with accumulate=True (argument 3 or the keyword)."""
    return [
        name
        for name, args, kwargs in calls
        if "index_put" in name and kwargs.get("accumulate", len(args) > 3 and args[3])
    ]


def test_shared_prefix_gradient_adds_a_groups_rows_in_a_fixed_order():
    # `x[rows]`'s backward is index_put_(accumulate=True): on CPU it adds the rows of a
    # group with atomic adds, in an order that changes from run to run with two or more
    # threads (the demo's training metrics drifted apart from step 2 on). index_select's
    # backward (index_add_) adds them in row order: the same bits every run.
    model = qwen2()
    prompts, ids, mask = batch()  # two groups of three rows share their prompt
    logprobs = response_logprobs(model, prompts, ids, mask, PAD)
    with _AtenOps() as ops:
        (logprobs * mask).sum().backward()
    assert any("index_add" in name for name, _, _ in ops.calls)  # the rows are summed
    assert _accumulating_index_puts(ops.calls) == []


def test_extend_writes_a_static_cache_and_concatenates_a_prompt_only_one():
    """The decode's preallocated cache is written in place; a cache exactly `col` wide
    (the training forward's prompt) is extended by `cat`: the same keys either way, and
    only the second keeps the in-place write out of the autograd graph."""
    prompt = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    new = -torch.arange(1, 2 * 1 * 2 * 2 + 1, dtype=torch.float32).view(2, 1, 2, 2)
    static = torch.full((2, 1, 7, 2), float("nan"))
    static[:, :, :3] = prompt
    written = _extend(static, new, 3)
    assert torch.equal(static[:, :, 3:5], new)  # in place
    assert written.shape == (2, 1, 5, 2) and written.data_ptr() == static.data_ptr()
    leaf = prompt.clone().requires_grad_()
    extended = _extend(leaf, new, 3)
    assert torch.equal(extended, written) and torch.equal(leaf, prompt)  # leaf untouched
    extended.sum().backward()
    assert torch.equal(leaf.grad, torch.ones_like(prompt))
