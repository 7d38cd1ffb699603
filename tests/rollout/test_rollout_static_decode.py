"""The static-cache decode loop equals the model's own forward: same tokens from the same
generator, same log-probs (float tolerance), on Qwen2 (biased QKV) and a grouped-query
Llama; the trainer's forward agrees with its log-probs; unsupported models fall back."""

import pytest
import torch
from rounding_testlib import logprob_atol
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models.fused_llama import supports
from rlvr.rollout import HFEngine, SamplingParams

PROMPTS = ["Q: 37+85=? A:", "Q: 1+2=? A:", "Q: 99+9=? A:"]  # different lengths: left padding


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer()


def qwen2(tokenizer):
    return build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0)


def llama_gqa(tokenizer):
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # two query heads per key/value head
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        rope_theta=500.0,
    )
    torch.manual_seed(1)
    return LlamaForCausalLM(config).eval()


def both(model, tokenizer, **params):
    runs = []
    for static in (True, False):
        engine = HFEngine(model, tokenizer, static_cache=static)
        assert (engine._static is not None) == static
        gen = engine.generate(PROMPTS, SamplingParams(**params), torch.Generator().manual_seed(3))
        runs.append(gen)
    return runs


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
@pytest.mark.parametrize(
    "params",
    [
        {"group_size": 4, "max_new_tokens": 12},
        {"group_size": 3, "max_new_tokens": 9, "temperature": 0.7, "top_p": 0.9},
    ],
)
def test_static_decode_equals_model_forward(build, params, tokenizer):
    model = build(tokenizer)
    fast, ref = both(model, tokenizer, **params)
    assert torch.equal(fast.response_ids, ref.response_ids)
    assert torch.equal(fast.response_mask, ref.response_mask) and fast.texts == ref.texts
    # Static-cache decode, model forward and the trainer add in other orders: log-probs of
    # logits / T within τ / T (rounding_testlib.logprob_atol).
    tau = logprob_atol(model.config) / params.get("temperature", 1.0)
    torch.testing.assert_close(fast.sampler_logprobs, ref.sampler_logprobs, atol=tau, rtol=0)
    trainer = response_logprobs(
        model,
        fast.prompt_ids,
        fast.response_ids,
        fast.response_mask,
        pad_id=tokenizer.pad_token_id,
        temperature=params.get("temperature", 1.0),
    )
    if params.get("top_p", 1.0) == 1.0:
        torch.testing.assert_close(trainer, fast.sampler_logprobs, atol=tau, rtol=0)
    else:  # the sampler reports the renormalised nucleus: log p − log Z with Z ≤ 1
        assert bool((fast.sampler_logprobs >= trainer - tau).all())


def test_static_decode_stops_at_eos_like_the_model_forward(tokenizer):
    model = qwen2(tokenizer)
    with torch.no_grad():  # make EOS likely so rows end at different steps
        model.get_output_embeddings().weight[tokenizer.eos_token_id] *= 0
        model.get_output_embeddings().weight[tokenizer.eos_token_id] += 0.02
    fast, ref = both(model, tokenizer, group_size=4, max_new_tokens=20)
    lengths = fast.response_lengths
    assert lengths.min() < lengths.max()  # the case under test: ragged ends
    assert torch.equal(lengths, ref.response_lengths)
    assert torch.equal(fast.response_ids, ref.response_ids)


def test_unsupported_models_use_their_own_forward(tokenizer):
    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=32, n_layer=1, n_head=2)
    )
    assert not supports(gpt2)
    assert HFEngine(gpt2, tokenizer)._static is None
    assert supports(qwen2(tokenizer))


def test_gradient_checkpointing_keeps_the_models_own_forward(tokenizer):
    model = qwen2(tokenizer)
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x
    (enable or model.gradient_checkpointing_enable)()
    assert not supports(model)


def test_sliding_window_and_dynamic_rope_keep_the_models_own_forward(tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    small = {"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "intermediate_size": 64}
    small |= {"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2}
    windowed = MistralForCausalLM(MistralConfig(**small, sliding_window=8))
    assert not supports(windowed)
    assert supports(MistralForCausalLM(MistralConfig(**small, sliding_window=None)))
    dynamic = LlamaForCausalLM(
        LlamaConfig(**small, rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    )
    assert dynamic.model.rotary_emb.rope_type == "dynamic" and not supports(dynamic)


def test_the_decoder_keeps_no_fused_weights_after_a_rollout(tokenizer):
    """The fused projections are a copy of the weights (0.4 GiB on SmolLM2-135M): a decoder
    that kept them between rollouts would hold them through the update, the step's peak.
    After a rollout none is left, and the next rollout reads the updated weights."""
    model = qwen2(tokenizer)
    engine = HFEngine(model, tokenizer, static_cache=True)
    params = SamplingParams(group_size=2, max_new_tokens=5)
    first = engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    assert engine._static.fused.layers == []
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(-1.0)  # an "update" of a fused weight
    second = engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    assert engine._static.fused.layers == []
    assert not torch.equal(first.response_ids, second.response_ids)


@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_packed_weights_change_no_token_and_no_log_prob(build, tokenizer, monkeypatch):
    """The decode loop packs its weights for MKL's products (rlvr/models/lean/packed.py)
    where the floats stay F.linear's: the same tokens and log-probs, bit for bit, as
    without packing, and the packed products did run (on a CPU with MKL)."""
    from rlvr.models.lean import packed
    from rlvr.rollout import static_decode

    runs, calls = [], []
    linear = packed.PackedWeight.linear
    monkeypatch.setattr(
        packed.PackedWeight, "linear", lambda self, *a: calls.append(1) or linear(self, *a)
    )
    model = build(tokenizer)
    for steps in (10**9, 1):
        monkeypatch.setattr(static_decode, "PACK_STEPS", steps)
        engine = HFEngine(model, tokenizer, static_cache=True)
        params = SamplingParams(group_size=4, max_new_tokens=12)
        runs.append(engine.generate(PROMPTS, params, torch.Generator().manual_seed(3)))
        assert engine._static.fused.layers == []  # the packed copies are dropped too
    assert torch.equal(runs[0].response_ids, runs[1].response_ids)
    assert torch.equal(runs[0].sampler_logprobs, runs[1].sampler_logprobs)
    assert (len(calls) > 0) == packed.available()


def test_the_kept_heap_is_released_before_the_weights_are_packed(tokenizer, monkeypatch):
    """A decode long enough to pack its weights first hands the heap's kept free pages
    back (`rlvr.models.lean.heap.release_kept`), so the packed copies are not stacked on
    the heap the last update kept; a decode too short to pack releases nothing."""
    from rlvr.models.fused_llama import FusedLlama
    from rlvr.rollout import static_decode

    events = []
    monkeypatch.setattr(static_decode, "release_kept", lambda: events.append("release"))
    pack = FusedLlama.pack
    monkeypatch.setattr(
        FusedLlama, "pack", lambda self, rows: events.append("pack") or pack(self, rows)
    )
    monkeypatch.setattr(static_decode, "PACK_STEPS", 4)
    engine = HFEngine(llama_gqa(tokenizer), tokenizer, static_cache=True)
    generator = torch.Generator().manual_seed(3)
    engine.generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=3), generator)
    assert events == []
    engine.generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=4), generator)
    assert events == ["release", "pack"]
