"""Multi-turn episodes from image prompts (issue 46): the picture stays in every turn's
context, a kept KV cache samples what a re-prefill samples, and the trainer's log-probs of
the whole trajectory equal the sampler's on policy tokens (observations stay forced)."""

from __future__ import annotations

import torch
from vision_testlib import TOK, images, small_vlm, vlm_logprob_atol

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.models import response_logprobs
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.episodes import run_episodes
from rlvr.vision import ImagePrompt


class _Chatty(Environment):
    """Ends a turn at common characters and answers with a short observation."""

    stop = ("a", "e", "o", "1", " ")

    def step(self, turn):
        return Reply("<" + turn[-2:] + ">")


def _episodes(engine, reuse: bool):
    prompts = [
        TOK.encode_images(text, pixels)
        for text, pixels in zip(["Look: <image> A:", "<image>?"], images(2, seed=4), strict=True)
    ]
    budgets = EpisodeBudgets(max_turns=4, max_turn_tokens=5)
    params = SamplingParams(group_size=2, max_new_tokens=30)
    return run_episodes(
        engine,
        TOK,
        prompts,
        lambda i: _Chatty(),
        params,
        budgets,
        torch.Generator().manual_seed(0),
        reuse_cache=reuse,
    )


def test_image_episodes_with_a_kept_cache_equal_re_prefilled_ones():
    engine = HFEngine(small_vlm(), TOK)
    ours, theirs = _episodes(engine, reuse=True), _episodes(engine, reuse=False)
    assert all(isinstance(p, ImagePrompt) for p in ours.prompt_ids)
    assert max(e.turns for e in ours.episodes) >= 2 and ours.forced_mask.sum() > 0
    assert torch.equal(ours.response_ids, theirs.response_ids) and ours.texts == theirs.texts
    tau = vlm_logprob_atol(engine.model)  # cache vs re-prefill: vision_testlib.py
    torch.testing.assert_close(ours.sampler_logprobs, theirs.sampler_logprobs, atol=tau, rtol=0)
    trainer = response_logprobs(
        engine.model, ours.prompt_ids, ours.response_ids, ours.response_mask, TOK.pad_token_id
    )
    policy = (ours.response_mask - ours.forced_mask) > 0
    torch.testing.assert_close(trainer[policy], ours.sampler_logprobs[policy], atol=tau, rtol=0)
