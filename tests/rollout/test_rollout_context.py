"""The engines never generate past the model's context (max_position_embeddings), and a
budget that cannot fit is refused with the numbers that decide it."""

import pytest
import torch

from rlvr.models import CharTokenizer, build_tiny_policy, tiny_qwen2_config
from rlvr.models.context import check_context, context_length, response_limits
from rlvr.rollout import HFEngine, SamplingParams

PROMPTS = ["Q: 37+85=? A:", "Q: 1+2=? A:"]  # 13 and 11 characters: one token each


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer()


def test_response_limits_by_hand():
    # context 20: prompt 13 leaves 7, prompt 11 leaves 9, prompt 3 leaves 17 > 16 asked
    assert response_limits([13, 11, 3], 16, 20) == [7, 9, 16]
    assert response_limits([13, 11], 16, None) == [16, 16]
    with pytest.raises(ValueError, match=r"prompt 1 has 20 tokens.*context length of 20"):
        response_limits([3, 20], 16, 20)


def test_check_context_names_the_numbers():
    check_context(16, 20, longest_prompt=4)  # 4 + 16 = 20 fits exactly
    check_context(10_000, None, longest_prompt=50)  # no context known: nothing to check
    with pytest.raises(ValueError, match=r"max_new_tokens=512 does not fit .* 512 tokens"):
        check_context(512, 512)  # alone it leaves no room for any prompt
    with pytest.raises(
        ValueError,
        match=r"max_new_tokens=17 plus the longest prompt \(4 tokens\) exceeds .* 20 tokens"
        r".*max_new_tokens ≤ 16",
    ):
        check_context(17, 20, longest_prompt=4)
    with pytest.raises(ValueError, match=r"longest prompt \(25 tokens\) fills"):
        check_context(8, 20, longest_prompt=25)


@pytest.mark.parametrize("static_cache", [True, False])
def test_hf_engine_stops_at_the_context(tokenizer, static_cache):
    config = tiny_qwen2_config(tokenizer.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2)
    config.max_position_embeddings = 20
    model = build_tiny_policy(config, seed=0)
    assert context_length(model) == 20
    engine = HFEngine(model, tokenizer, static_cache=static_cache)
    gen = engine.generate(
        PROMPTS, SamplingParams(group_size=4, max_new_tokens=16), torch.Generator().manual_seed(0)
    )
    prompt_lengths = torch.tensor([len(p) for p in gen.prompt_ids])  # 13 ×4, 11 ×4
    lengths = gen.response_lengths
    # room: 20 − 13 = 7 and 20 − 11 = 9 tokens, never the 16 asked for
    assert (prompt_lengths + lengths <= 20).all()
    assert gen.response_ids.shape[1] <= 9
    ended = gen.response_ids.gather(1, (lengths - 1)[:, None])[:, 0] == tokenizer.eos_token_id
    room = torch.tensor([7] * 4 + [9] * 4)
    # a row without EOS ran up to the context and counts as truncated
    assert torch.equal(lengths[~ended], room[~ended])
    assert torch.equal(gen.truncated, ~ended)


def test_hf_engine_refuses_a_prompt_that_fills_the_context(tokenizer):
    config = tiny_qwen2_config(tokenizer.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2)
    config.max_position_embeddings = 12
    engine = HFEngine(build_tiny_policy(config, seed=0), tokenizer)
    with pytest.raises(ValueError, match=r"prompt 0 has 13 tokens.*context length of 12"):
        engine.generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=4), torch.Generator())
