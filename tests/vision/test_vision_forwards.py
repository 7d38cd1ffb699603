"""Pixels reach every forward (issue 46): the sampler, its scorer, π_old/π_ref's
`Rollout.forward_rows` and the trainer's differentiable forward all see a row's image, so
perturbing one image moves exactly its rows' log-probs (the ratio staying exactly 1:
test_vision_update.py); the KV session serves image prompts as a re-prefill does and
never reuses a cache built for other pixels."""

from __future__ import annotations

import pytest
import torch
from vision_testlib import TOK, images, rollout_of, small_vlm, vlm_logprob_atol

from rlvr.models import response_logprobs
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.kv_session import open_session
from rlvr.train.records.rollout_record import Rollout
from rlvr.vision import ImagePrompt, image_inputs
from rlvr.vision.prompts import image_tail, shared_prefix

TEXTS = ["How many? <image> A:", "<image>Count:"]


def _prompts(pixels: torch.Tensor) -> list[ImagePrompt]:
    return [TOK.encode_images(t, p) for t, p in zip(TEXTS, pixels, strict=True)]


def _with_pixels(prompts: list[list[int]], pixels: torch.Tensor) -> list[list[int]]:
    """The same ids, each row's image replaced by `pixels[prompt index]`."""
    return [ImagePrompt(p, pixels[i // 2], p.spans) for i, p in enumerate(prompts)]


def test_the_prompt_carries_its_pixels_through_sampling_and_the_record():
    model, pixels = small_vlm(), images(2, seed=0)
    gen = HFEngine(model, TOK).generate_ids(
        _prompts(pixels), SamplingParams(group_size=2, max_new_tokens=5), torch.Generator()
    )
    # "How many? " is 10 characters, then the image's 9 placeholders, then " A:".
    assert gen.prompt_ids[0].spans == [(10, 19)] and len(gen.prompt_ids[0]) == 22
    assert gen.prompt_ids[0].pixel_values is gen.prompt_ids[1].pixel_values  # one group
    record = Rollout.concat([rollout_of(gen).select(torch.tensor([3, 0]))])
    assert record.prompt_ids[0].pixel_values is gen.prompt_ids[3].pixel_values
    assert torch.equal(image_inputs(record.prompt_ids)["pixel_values"], pixels[[1, 0], 0])


def test_perturbing_one_image_moves_its_rows_in_every_forward_and_the_ratio_stays_one():
    model, pixels = small_vlm(), images(2, seed=0)
    engine = HFEngine(model, TOK)
    gen = engine.generate_ids(
        _prompts(pixels), SamplingParams(group_size=2, max_new_tokens=5), torch.Generator()
    )
    rollout = rollout_of(gen)
    perturbed = pixels.clone()
    perturbed[0, 0, :, :4, :4] += 0.5  # one patch of image 0: rows 0 and 1 show it
    moved = rollout_of(gen)
    moved.prompt_ids = _with_pixels(gen.prompt_ids, perturbed)

    def old(r: Rollout) -> torch.Tensor:  # π_old and π_ref: Trainer._logprobs' forward
        return r.forward_rows(lambda p, y, m: response_logprobs(model, p, y, m, 0), 4)

    def trainer(r: Rollout) -> torch.Tensor:  # update._micro_step's, with the gradient
        return response_logprobs(model, r.prompt_ids, r.response_ids, r.response_mask, 0)

    def sampler(prompts: list[list[int]]) -> list[torch.Tensor]:
        responses = [
            row[: int(n)]
            for row, n in zip(gen.response_ids.tolist(), gen.response_lengths, strict=True)
        ]
        return engine.score_ids(prompts, responses)

    mask = rollout.response_mask > 0
    for forward in (old, trainer):
        before, after = forward(rollout), forward(moved)
        assert (before[:2] - after[:2])[mask[:2]].abs().min() > 0  # image 0's rows moved
        assert torch.equal(before[2:], after[2:])  # the same computation for image 1's rows
    scored, rescored = sampler(rollout.prompt_ids), sampler(moved.prompt_ids)
    assert all((a - b).abs().min() > 0 for a, b in zip(scored[:2], rescored[:2], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(scored[2:], rescored[2:], strict=True))
    # The sampler saw the same pixels the trainer sees: equal up to reordered sums.
    tau = vlm_logprob_atol(model)
    torch.testing.assert_close(trainer(rollout), gen.sampler_logprobs, atol=tau, rtol=0)


def test_a_forward_refuses_placeholders_without_their_pixels():
    model = small_vlm()
    prompt = _prompts(images(2, seed=0))[0]
    responses, mask = torch.tensor([[5, 6]]), torch.ones(1, 2)
    with pytest.raises(ValueError, match=r"9 image placeholder tokens but pixel_values fill 0"):
        response_logprobs(model, [list(prompt)], responses, mask, 0)  # the pixels dropped


def test_the_session_reuses_a_cache_only_for_the_same_pixels():
    model, pixels = small_vlm(), images(2, seed=0)
    engine = HFEngine(model, TOK)
    session = open_session(engine)
    prompts = _prompts(pixels)
    first = SamplingParams(group_size=1, max_new_tokens=3)
    gen = session.generate_ids(prompts, first, torch.Generator().manual_seed(2))
    contexts = [
        p + row.tolist() + TOK.encode("?") for p, row in zip(prompts, gen.response_ids, strict=True)
    ]
    assert all(isinstance(c, ImagePrompt) for c in contexts)  # the images stay with the ids
    step = SamplingParams(group_size=1, max_new_tokens=4)
    before = session.reused
    ours = session.generate_ids(contexts, step, torch.Generator().manual_seed(3), rows=[0, 1])
    # Each row's cache holds its prompt (22 and 15 ids) and 2 of its 3 fed-back tokens.
    assert session.reused - before == (22 + 2) + (15 + 2)
    full = engine.generate_ids(contexts, step, torch.Generator().manual_seed(3))
    assert torch.equal(ours.response_ids, full.response_ids)
    tau = vlm_logprob_atol(model)  # a kept cache vs a re-prefill: vision_testlib.py
    torch.testing.assert_close(ours.sampler_logprobs, full.sampler_logprobs, atol=tau, rtol=0)
    # Other pixels behind the same placeholder ids: nothing past the text before the image.
    other = ImagePrompt(contexts[0], images(1, seed=9)[0], contexts[0].spans)
    assert shared_prefix(session.ids[0], other, len(other) - 1) == 10
    tail = image_tail(other, 10)
    assert tail.spans == [(0, 9)] and tail.pixel_values is not None
    assert image_tail(other, 19) == list(other[19:]) and not isinstance(
        image_tail(other, 19), ImagePrompt
    )
    with pytest.raises(ValueError, match="cuts an image"):
        image_tail(other, 12)
