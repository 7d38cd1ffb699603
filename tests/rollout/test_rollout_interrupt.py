"""Forced length interruption: the phrase is inserted at the budget, the model finishes."""

from __future__ import annotations

import pytest
import torch
from rounding_testlib import logprob_atol

from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.interrupt import ForcedInterruption


def _engine(budget=3, phrase=" F:"):
    tokenizer = CharTokenizer()
    model = build_tiny_policy(
        tiny_qwen2_config(
            tokenizer.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2, intermediate=64
        ),
        seed=0,
    )
    return (
        ForcedInterruption(HFEngine(model, tokenizer), tokenizer, budget, phrase),
        model,
        tokenizer,
    )


def test_phrase_is_inserted_at_the_budget_and_masked_from_training():
    engine, _, tok = _engine()
    params = SamplingParams(group_size=2, max_new_tokens=10)
    gen = engine.generate(["Q: 1+2=? A:", "Q: 3+4=? A:"], params, torch.Generator().manual_seed(0))
    phrase = tok.encode(" F:")
    interrupted = (gen.forced_mask.sum(-1) > 0).nonzero().squeeze(-1).tolist()
    assert interrupted, "a random model should run past a 3-token budget"
    for r in interrupted:
        assert gen.response_ids[r, 3:6].tolist() == phrase
        assert gen.forced_mask[r].tolist()[:6] == [0, 0, 0, 1, 1, 1]
        assert gen.sampler_logprobs[r, 3:6].abs().sum() == 0
        assert gen.response_mask[r].sum() <= params.max_new_tokens
        assert " F:" in gen.texts[r]
    # Rows that ended before the budget are untouched.
    for r in set(range(4)) - set(interrupted):
        assert gen.forced_mask[r].sum() == 0


def test_tail_tokens_are_sampled_with_the_phrase_in_context():
    """The sampler's log-probs of the answer after the phrase equal the trainer's forward
    over prompt + response (phrase attended), so π_old/π_sampler stay consistent."""
    engine, model, tok = _engine()
    params = SamplingParams(group_size=2, max_new_tokens=10)
    gen = engine.generate(["Q: 1+2=? A:"], params, torch.Generator().manual_seed(1))
    trainer = response_logprobs(
        model, gen.prompt_ids, gen.response_ids, gen.response_mask, tok.pad_token_id
    )
    sampled = (gen.response_mask - gen.forced_mask) > 0
    tau = logprob_atol(model.config)  # decode vs full forward: rounding_testlib.py
    torch.testing.assert_close(trainer[sampled], gen.sampler_logprobs[sampled], atol=tau, rtol=0)


def test_budget_larger_than_the_response_changes_nothing():
    engine, model, tok = _engine(budget=50)
    params = SamplingParams(group_size=2, max_new_tokens=10)
    plain = HFEngine(model, tok).generate(["Q: 1+2=? A:"], params, torch.Generator().manual_seed(2))
    forced = engine.generate(["Q: 1+2=? A:"], params, torch.Generator().manual_seed(2))
    assert torch.equal(plain.response_ids, forced.response_ids) and forced.forced_mask is None


def test_a_budget_that_leaves_no_answer_room_is_refused():
    # budget 3 + phrase " F:" (3 characters) = 6: max_new_tokens 6 leaves 0, 7 leaves 1.
    engine, _, tok = _engine()
    assert engine.answer_room(7) == 1
    ForcedInterruption(engine.engine, tok, 3, " F:", max_new_tokens=7)
    with pytest.raises(ValueError, match="leave no room for an answer within max_new_tokens=6"):
        ForcedInterruption(engine.engine, tok, 3, " F:", max_new_tokens=6)
