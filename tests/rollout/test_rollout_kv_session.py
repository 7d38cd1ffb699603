"""The KV-cache session (rlvr.rollout.kv_session): a continued turn prefills only what its
row's cache lacks (counted by hand) and samples what a full re-prefill samples (same
tokens from the same generator, log-probs within float tolerance) on the lean decode loop
and on the model's own forward with a `DynamicCache`; episodes with reuse equal episodes
without, and the trainer's log-probs equal the sampler's after every observation."""

from __future__ import annotations

import pytest
import torch
from rounding_testlib import bf16_logprob_atol, logprob_atol
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.models.precision import bf16_supported, low_precision_copy
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout import episodes as episodes_module
from rlvr.rollout.episodes import run_episodes
from rlvr.rollout.interrupt import ForcedInterruption
from rlvr.rollout.kv_session import KVSession, open_session
from rlvr.train.sampler.precision import AutocastEngine, OwnCopyEngine

TOK = CharTokenizer()


def qwen2():
    config = tiny_qwen2_config(TOK.vocab_size, hidden=32, layers=2, heads=2, kv_heads=2)
    return build_tiny_policy(config, seed=0)


def llama_gqa():
    config = LlamaConfig(
        vocab_size=TOK.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return LlamaForCausalLM(config).eval()


def gpt2():  # learned absolute positions, no fused path: the model's own forward
    config = GPT2Config(vocab_size=TOK.vocab_size, n_embd=32, n_layer=2, n_head=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        return GPT2LMHeadModel(config).eval()


ENGINES = {  # name: (model, static_cache) — the lean loop and the model's own forward
    "qwen2-lean": (qwen2, True),
    "qwen2-own-forward": (qwen2, False),
    "llama-gqa-lean": (llama_gqa, True),
    "gpt2-own-forward": (gpt2, True),
}


def _engine(name):
    build, static = ENGINES[name]
    engine = HFEngine(build(), TOK, static_cache=static)
    assert (engine._static is not None) == (name.endswith("lean"))
    return engine


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_continued_turn_prefills_only_what_the_cache_lacks_and_equals_a_full_prefill(name):
    engine = _engine(name)
    session = open_session(engine)
    assert isinstance(session, KVSession)
    prompt = TOK.encode("Q: 1+2=? A:")  # 11 tokens
    first = SamplingParams(group_size=2, max_new_tokens=4)
    gen = session.generate_ids([prompt], first, torch.Generator().manual_seed(0))
    assert gen.response_lengths.tolist() == [4, 4]  # no EOS with this seed
    assert (session.prefilled, session.reused) == (11, 0)  # the prompt once, for its group
    a, b = gen.response_ids.tolist()
    observation = TOK.encode("=42")  # 3 tokens
    # Row 1 cut after 2 tokens (as at a stop string), row 0 kept whole, then each observed.
    contexts = [prompt + b[:2] + observation, prompt + a + observation]
    step = SamplingParams(group_size=1, max_new_tokens=5)
    ours = session.generate_ids(contexts, step, torch.Generator().manual_seed(1), rows=[1, 0])
    # Each row's cache holds the prompt and the 3 tokens fed back (the 4th was never fed).
    # Context 0 reuses 11 + 2 and prefills the observation (3); context 1 reuses 11 + 3 and
    # prefills the 4th token and the observation (1 + 3).
    assert session.reused == 13 + 14
    assert session.prefilled == 11 + 3 + 4
    full = engine.generate_ids(contexts, step, torch.Generator().manual_seed(1))
    assert torch.equal(ours.response_ids, full.response_ids) and ours.texts == full.texts
    assert torch.equal(ours.response_mask, full.response_mask)
    # A kept cache and a re-prefill add in other orders: within τ (rounding_testlib.py).
    tau = logprob_atol(engine.model.config)
    torch.testing.assert_close(ours.sampler_logprobs, full.sampler_logprobs, atol=tau, rtol=0)


def test_a_wrong_row_costs_speed_not_correctness():
    engine = _engine("qwen2-lean")
    session = open_session(engine)
    prompts = [TOK.encode("Q: 1+2=? A:"), TOK.encode("Q: 9*9=? A:")]
    first = SamplingParams(group_size=1, max_new_tokens=4)
    gen = session.generate_ids(prompts, first, torch.Generator().manual_seed(4))
    context = prompts[0] + gen.response_ids[0].tolist() + TOK.encode("!")
    step = SamplingParams(group_size=1, max_new_tokens=6)
    before = session.reused
    # Row 1 answered the other prompt: only "Q: " (3 tokens) is common, so 3 are reused.
    ours = session.generate_ids([context], step, torch.Generator().manual_seed(5), rows=[1])
    assert session.reused - before == 3
    full = engine.generate_ids([context], step, torch.Generator().manual_seed(5))
    assert torch.equal(ours.response_ids, full.response_ids)
    tau = logprob_atol(engine.model.config)  # cache vs re-prefill: rounding_testlib.py
    torch.testing.assert_close(ours.sampler_logprobs, full.sampler_logprobs, atol=tau, rtol=0)
    with pytest.raises(ValueError, match=r"rows holds 7, not a row of the previous call \(0..0\)"):
        session.generate_ids([context], step, torch.Generator(), rows=[7])


class _Chatty(Environment):
    """Ends a turn at any of five common characters (so tokens sampled past the stop are
    cut) and answers with an observation of varying length."""

    stop = ("a", "e", "o", "1", " ")

    def step(self, turn):
        return Reply("<" + turn[-3:] + ">")


def _episodes(engine, reuse, group=3, seed=0):
    budgets = EpisodeBudgets(max_turns=5, max_turn_tokens=6)
    params = SamplingParams(group_size=group, max_new_tokens=48)
    prompts = [TOK.encode("Q: 1+2=? A:"), TOK.encode("Q: 19*9=? A:")]
    generator = torch.Generator().manual_seed(seed)
    return run_episodes(
        engine, TOK, prompts, lambda i: _Chatty(), params, budgets, generator, reuse_cache=reuse
    )


@pytest.mark.parametrize("name", ["qwen2-lean", "qwen2-own-forward", "gpt2-own-forward"])
def test_episodes_with_a_kept_cache_equal_episodes_that_re_prefill(name, monkeypatch):
    engine = _engine(name)
    opened = []

    def spy(engine):
        opened.append(open_session(engine))
        return opened[-1]

    monkeypatch.setattr(episodes_module, "open_session", spy)
    ours = _episodes(engine, reuse=True)
    theirs = _episodes(engine, reuse=False)
    assert len(opened) == 1  # reuse_cache=False opens none
    session = opened[0]
    assert max(e.turns for e in ours.episodes) >= 3 and ours.forced_mask.sum() > 0
    assert torch.equal(ours.response_ids, theirs.response_ids) and ours.texts == theirs.texts
    assert torch.equal(ours.forced_mask, theirs.forced_mask)
    tau = logprob_atol(engine.model.config)  # cache vs re-prefill: rounding_testlib.py
    torch.testing.assert_close(ours.sampler_logprobs, theirs.sampler_logprobs, atol=tau, rtol=0)
    # Prefilled: each prompt once, then per continued turn its observation and at most the
    # turn's last kept token (never fed back when the turn used every decode step).
    prompts = 11 + 12
    observations = sum(e.observation_tokens for e in ours.episodes)
    continued = sum(e.turns - 1 for e in ours.episodes)
    assert prompts + observations <= session.prefilled <= prompts + observations + continued
    assert session.reused > 4 * session.prefilled
    # The trainer's log-probs of the whole trajectories equal the sampler's.
    trainer = response_logprobs(
        engine.model, ours.prompt_ids, ours.response_ids, ours.response_mask, TOK.pad_token_id
    )
    policy = (ours.response_mask - ours.forced_mask) > 0
    torch.testing.assert_close(trainer[policy], ours.sampler_logprobs[policy], atol=tau, rtol=0)


def test_greedy_episodes_with_a_kept_cache_equal_those_that_re_prefill():
    """Near-greedy sampling (top_p → only the most probable token) takes no randomness:
    the cache path picks the argmax the re-prefill path picks, turn after turn."""
    engine = _engine("llama-gqa-lean")
    budgets = EpisodeBudgets(max_turns=4, max_turn_tokens=5)
    params = SamplingParams(group_size=1, max_new_tokens=40, top_p=1e-6)
    prompts = [TOK.encode("Q: 1+2=? A:"), TOK.encode("Q: 19*9=? A:")]
    runs = [
        run_episodes(engine, TOK, prompts, lambda i: _Chatty(), params, budgets,
                     torch.Generator().manual_seed(s), reuse_cache=reuse)
        for s, reuse in ((0, True), (99, False))
    ]  # fmt: skip
    assert runs[0].texts == runs[1].texts and max(e.turns for e in runs[0].episodes) >= 2


def test_no_session_where_the_cache_cannot_be_kept():
    small = {"vocab_size": TOK.vocab_size, "hidden_size": 32, "intermediate_size": 64}
    small |= {"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2}
    windowed = MistralForCausalLM(MistralConfig(**small, sliding_window=8))
    assert open_session(HFEngine(windowed, TOK)) is None  # the window drops old columns
    dynamic = LlamaForCausalLM(
        LlamaConfig(**small, rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    )
    assert open_session(HFEngine(dynamic, TOK)) is None  # angles change with the length
    wrapped = ForcedInterruption(HFEngine(qwen2(), TOK), TOK, budget=4, phrase="!")
    assert open_session(wrapped) is None
    assert open_session(HFEngine(llama_gqa(), TOK, static_cache=False)) is not None


@pytest.mark.skipif(not bf16_supported("cpu"), reason="no native bf16 on this CPU")
def test_the_precision_wrappers_keep_a_session():
    # a bf16 sampler copy: the session is its own engine's; the trainer's module under bf16
    # autocast: the session's calls run under that autocast too, as the engine's do
    policy = qwen2()
    twin = low_precision_copy(policy, torch.bfloat16)
    own = OwnCopyEngine(HFEngine(twin, TOK), policy, twin)
    session = open_session(own)
    assert isinstance(session, KVSession) and session.engine is own.engine
    autocast_engine = AutocastEngine(HFEngine(policy, TOK), "bf16", policy)
    prompt, params = TOK.encode("Q: 1+2=? A:"), SamplingParams(group_size=2, max_new_tokens=4)

    def sample(source):
        return source.generate_ids([prompt], params, torch.Generator().manual_seed(0))

    ours = sample(open_session(autocast_engine))
    full = sample(autocast_engine)
    plain = sample(open_session(HFEngine(policy, TOK)))
    assert torch.equal(ours.response_ids, full.response_ids)
    # Both under bf16 autocast, cache vs re-prefill: rounding_testlib.bf16_logprob_atol.
    atol = bf16_logprob_atol(policy.config)
    torch.testing.assert_close(ours.sampler_logprobs, full.sampler_logprobs, rtol=0, atol=atol)
    gap = (ours.sampler_logprobs - plain.sampler_logprobs).abs().max()
    assert gap > 1e-4  # bf16 rounding: the session did run under the autocast
