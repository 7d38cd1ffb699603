"""peft LoRA layers take the fused Llama forward: with gradients the low-rank term runs
beside the frozen product (y = W·x + s·B·A·x), without them it is merged into W once.
Both equal peft's own forward within float rounding, gradients reach A and B only,
switched-off adapters give the base model bit for bit, and what the fused forward cannot
reproduce (acting dropout, DoRA, merged adapters) keeps the model's own forward."""

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from rounding_testlib import LOGIT_SCALE, forward_terms, reorder_atol
from test_models_fused_llama import PAD, batch, llama_gqa, per_row_reference, qwen2

from rlvr.models import response_logprobs
from rlvr.models.fused_llama import supports
from rlvr.models.hf_policy import adapters_disabled
from rlvr.rollout import HFEngine, SamplingParams

RANK = 2
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def with_lora(model, targets=ALL, **options):
    """`model` with LoRA on `targets` as rlvr attaches it (the adapted base model, not
    peft's wrapper) and B drawn at random: peft starts B at 0, where the adapter is a no-op
    and any forward that drops it would pass."""
    options = {"r": RANK, "lora_alpha": 4, "target_modules": targets} | options
    adapted = get_peft_model(model, LoraConfig(**options)).get_base_model()
    torch.manual_seed(5)
    for name, p in adapted.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.3)
    return adapted


def atol(config, targets=ALL):
    """The fused and per-row forwards add in other orders (`forward_terms`); an adapter adds
    the chain A·x (hidden terms, counted with W·x) then B·z over the fused projection's Σr
    ≤ 3r terms, at each of a layer's 4 projection stages; merging adds the r-term sum of
    B·A to each weight. n·ε·M with M = LOGIT_SCALE (rounding_testlib)."""
    extra = config.num_hidden_layers * 4 * (3 * RANK + RANK)
    return reorder_atol(forward_terms(config) + extra, LOGIT_SCALE)


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
@pytest.mark.parametrize("targets", [ALL, ["q_proj", "v_proj", "down_proj"]])
def test_lora_logprobs_and_gradients_equal_pefts_forward(build, targets):
    model = with_lora(build(), targets)
    assert supports(model)
    prompts, ids, mask = batch()
    advantages = torch.linspace(-1, 1, 7)[:, None]
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    results = []
    for forward in (response_logprobs, per_row_reference):
        model.zero_grad()
        logprobs = forward(model, prompts, ids, mask, PAD)
        (logprobs * advantages * mask).sum().backward()
        results.append((logprobs.detach(), [p.grad.clone() for p in trained]))
    (fast, fast_grads), (ref, ref_grads) = results
    tau = atol(model.config, targets)
    torch.testing.assert_close(fast, ref, atol=tau, rtol=0)
    # The adapter moved the log-probs (B ≠ 0): a forward that dropped it would fail above.
    with adapters_disabled(model), torch.no_grad():
        base = per_row_reference(model, prompts, ids, mask)
    assert (base - ref).abs().max() > 10 * tau
    terms = ids.numel() + forward_terms(model.config)  # as the plain model's gradient test
    for a, b in zip(fast_grads, ref_grads, strict=True):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, atol=reorder_atol(terms, b.abs().max().item()), rtol=0)


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_without_gradients_the_merged_adapter_equals_pefts_forward(build):
    model = with_lora(build())
    prompts, ids, mask = batch()
    with torch.no_grad():
        fast = response_logprobs(model, prompts, ids, mask, PAD)
        ref = per_row_reference(model, prompts, ids, mask)
    torch.testing.assert_close(fast, ref, atol=atol(model.config), rtol=0)


def test_switched_off_adapters_give_the_base_model_bit_for_bit():
    prompts, ids, mask = batch()
    plain = qwen2()
    with torch.no_grad():
        expected = response_logprobs(plain, prompts, ids, mask, PAD)
    model = with_lora(qwen2())
    with torch.no_grad(), adapters_disabled(model):
        assert supports(model)
        got = response_logprobs(model, prompts, ids, mask, PAD)
    assert torch.equal(got, expected)


def test_lora_decode_equals_pefts_own_decode():
    from rlvr.models import CharTokenizer

    tokenizer = CharTokenizer()
    from rlvr.models import build_tiny_policy, tiny_qwen2_config

    model = with_lora(build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0)).eval()
    prompts = ["Q: 37+85=? A:", "Q: 1+2=? A:"]
    runs = []
    for static in (True, False):
        engine = HFEngine(model, tokenizer, static_cache=static)
        assert (engine._static is not None) == static
        params = SamplingParams(group_size=3, max_new_tokens=10)
        runs.append(engine.generate(prompts, params, torch.Generator().manual_seed(3)))
    fast, ref = runs
    assert torch.equal(fast.response_ids, ref.response_ids)
    tau = atol(model.config)
    torch.testing.assert_close(fast.sampler_logprobs, ref.sampler_logprobs, atol=tau, rtol=0)


def test_what_the_fused_forward_cannot_reproduce_keeps_the_models_own_forward():
    # Dropout on the adapter's input acts in training mode only.
    model = with_lora(qwen2(), lora_dropout=0.1)
    model.train()
    assert not supports(model)
    model.eval()
    assert supports(model)
    # DoRA rescales W + s·B·A by a learned magnitude: another function.
    assert not supports(with_lora(qwen2(), use_dora=True))
    # A merged adapter lives in W, and peft unmerges it when adapters are switched off.
    merged = with_lora(qwen2())
    merged.get_submodule("model.layers.0.self_attn.q_proj").merge()
    assert not supports(merged)
    # peft's wrapper has no `embed_tokens` on its base model; rlvr attaches the adapted model.
    assert not supports(get_peft_model(qwen2(), LoraConfig(r=RANK, target_modules=["q_proj"])))


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_the_in_place_low_rank_sum_is_the_out_of_place_one_bit_for_bit(build, monkeypatch):
    """`_project` adds B·(A·x) into W·x in place: log-probs and every adapter's gradient
    equal those of `y + B·(A·x)` exactly (a float addition is the same either way)."""
    from rlvr.models import fused_llama

    model = with_lora(build())
    added_in_place = []
    add_ = torch.Tensor.add_

    def spy(self, other):
        added_in_place.append(self.shape)
        return add_(self, other)

    def logprobs_and_grads():
        model.zero_grad()
        logprobs = response_logprobs(model, *batch(), PAD)
        logprobs.sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        return logprobs.detach(), grads

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "add_", spy)
        got, got_grads = logprobs_and_grads()
    assert added_in_place  # the in-place path ran
    with monkeypatch.context() as patch:
        patch.setattr(
            fused_llama,
            "_project",
            lambda x, w, b, low: (
                # q/k/v and gate/up come as the weights `CatLinear` concatenates
                (
                    fused_llama.CatLinear.apply(x, b, *w)
                    if isinstance(w, tuple)
                    else F.linear(x, w, b)
                )
                + (0 if low is None else F.linear(F.linear(x, low[0]), low[1]))
            ),
        )
        want, want_grads = logprobs_and_grads()
    assert torch.equal(got, want) and all(g.abs().max() > 0 for g in want_grads)
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads, strict=True))
