"""HFEngine: determinism, EOS and truncation bookkeeping, group layout, greedy limit, and
agreement between sampler and trainer log-probs."""

import pytest
import torch
from rounding_testlib import logprob_atol

from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.rollout import HFEngine, SamplingParams, top_p_filter

PROMPTS = ["Q: 37+85=? A:", "Q: 1+2=? A:", "Q: 99+9=? A:"]  # different lengths: left padding


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer()


@pytest.fixture(scope="module")
def engine(tokenizer):
    return HFEngine(build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0), tokenizer)


def sample(engine, seed, **params):
    return engine.generate(PROMPTS, SamplingParams(**params), torch.Generator().manual_seed(seed))


def test_same_generator_seed_same_samples(engine):
    a, b = sample(engine, 7, group_size=4), sample(engine, 7, group_size=4)
    assert torch.equal(a.response_ids, b.response_ids) and a.texts == b.texts
    # The same computation twice in one process (same shapes, kernels and order): bitwise.
    torch.testing.assert_close(a.sampler_logprobs, b.sampler_logprobs, atol=0, rtol=0)
    assert not torch.equal(a.response_ids, sample(engine, 8, group_size=4).response_ids)


def test_layout_masks_and_groups(engine, tokenizer):
    gen = sample(engine, 0, group_size=4, max_new_tokens=6)
    batch, steps = gen.response_ids.shape
    assert batch == 12 and steps <= 6 and gen.response_mask.dtype == torch.float32
    assert gen.prompt_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert gen.prompt_ids == [tokenizer.encode(p) for p in PROMPTS for _ in range(4)]
    lengths = gen.response_lengths
    assert int(lengths.max()) == steps  # T is the longest response
    for b in range(batch):
        n = int(lengths[b])
        assert gen.response_mask[b].tolist() == [1.0] * n + [0.0] * (steps - n)
        assert (gen.response_ids[b, n:] == tokenizer.pad_token_id).all()
        assert (gen.sampler_logprobs[b, n:] == 0).all() and (gen.sampler_logprobs[b, :n] < 0).all()
        ends_with_eos = gen.response_ids[b, n - 1] == tokenizer.eos_token_id
        assert bool(gen.truncated[b]) == (not ends_with_eos) and (ends_with_eos or n == 6)


def test_sampler_logprobs_equal_trainer_logprobs(engine, tokenizer):
    # top_p = 1 only: with a nucleus the sampler reports renormalised log-probs
    # (test_rollout_nucleus).
    for params in ({"temperature": 1.0}, {"temperature": 0.7}):
        gen = sample(engine, 1, group_size=8, max_new_tokens=14, **params)
        trainer = response_logprobs(
            engine.model,
            gen.prompt_ids,
            gen.response_ids,
            gen.response_mask,
            pad_id=tokenizer.pad_token_id,
            temperature=params["temperature"],
        )
        # Decode vs full forward: within τ / T (rounding_testlib.logprob_atol).
        tau = logprob_atol(engine.model.config) / params["temperature"]
        torch.testing.assert_close(trainer, gen.sampler_logprobs, atol=tau, rtol=0)


def greedy(model, tokenizer, prompt, steps):
    """Reference: argmax decoding with a full forward per token, no padding, no cache."""
    ids = tokenizer.encode(prompt)
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        if ids[-1] == tokenizer.eos_token_id:
            break
    return ids[len(tokenizer.encode(prompt)) :]


@pytest.mark.parametrize("params", [{"temperature": 1e-4}, {"top_p": 1e-6}])
def test_near_greedy_sampling_is_argmax_decoding(engine, tokenizer, params):
    gen = sample(engine, 3, group_size=3, max_new_tokens=8, **params)
    with torch.no_grad():
        for b in range(9):
            n = int(gen.response_lengths[b])
            expected = greedy(engine.model, tokenizer, PROMPTS[b // 3], 8)
            assert gen.response_ids[b, :n].tolist() == expected


def test_training_mode_is_restored(engine):
    engine.model.train()
    sample(engine, 0, group_size=1, max_new_tokens=2)
    assert engine.model.training
    engine.model.eval()
    sample(engine, 0, group_size=1, max_new_tokens=2)
    assert not engine.model.training


class ScriptedEngine(HFEngine):
    """Logits scripted per (row, step): every row says "a", then row r emits EOS at step
    `EOS_AT[r]` and "x" before it. Counts forward calls to check the early exit."""

    EOS_AT = (1, 2, None, None)

    def __init__(self, tokenizer, eos_at):
        super().__init__(
            build_tiny_policy(
                tiny_qwen2_config(tokenizer.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2), 0
            ),
            tokenizer,
            static_cache=False,  # the script replaces the generic path's forward
        )
        self.eos_at, self.calls = eos_at, 0

    def _next_logits(self, input_ids, attention_mask, position_ids, cache):
        step, batch = self.calls, input_ids.shape[0]
        self.calls += 1
        logits = torch.zeros(batch, self.tokenizer.vocab_size)
        for r in range(batch):
            char = "a" if step == 0 else "x"
            token = (
                self.tokenizer.eos_token_id
                if self.eos_at[r] == step
                else self.tokenizer.encode(char)[0]
            )
            logits[r, token] = 50.0
        return logits


def test_eos_truncation_and_texts(tokenizer):
    engine = ScriptedEngine(tokenizer, eos_at=(1, 2, None, None))
    gen = engine.generate(["Q:"], SamplingParams(group_size=4, max_new_tokens=5), torch.Generator())
    assert gen.texts == ["a", "ax", "axxxx", "axxxx"]
    assert gen.response_lengths.tolist() == [2, 3, 5, 5]  # EOS counts as a generated token
    assert gen.truncated.tolist() == [False, False, True, True]
    assert gen.response_ids[0].tolist() == [*tokenizer.encode("a"), 1, 0, 0, 0]


def test_decoding_stops_when_every_row_has_ended(tokenizer):
    engine = ScriptedEngine(tokenizer, eos_at=(1, 2, 1, 2))
    gen = engine.generate(
        ["Q:"], SamplingParams(group_size=4, max_new_tokens=10), torch.Generator()
    )
    assert engine.calls == 3 and gen.response_ids.shape == (4, 3)
    assert not gen.truncated.any()


def test_top_p_filter_by_hand():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]], dtype=torch.float64)
    # sorted: 0.5, 0.3, 0.15, 0.05; mass before each: 0, 0.5, 0.8, 0.95; keep mass_before < p
    assert top_p_filter(probs, 0.79).tolist() == [[0.0, 0.5, 0.0, 0.3]]
    assert top_p_filter(probs, 0.81).tolist() == [[0.15, 0.5, 0.0, 0.3]]
    assert top_p_filter(probs, 0.5).tolist() == [[0.0, 0.5, 0.0, 0.0]]
    assert top_p_filter(probs, 1.0) is probs


def test_bad_prompts_speak(engine):
    with pytest.raises(ValueError, match="at least one prompt"):
        engine.generate([], SamplingParams(), torch.Generator())
    with pytest.raises(ValueError, match="prompt 1"):
        engine.generate(["Q:", ""], SamplingParams(), torch.Generator())
