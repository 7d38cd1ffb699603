"""Image prompts as ids (rlvr.vision.prompts): hand-counted placeholder spans, decoding,
the errors, and text-only prompts left exactly as they were."""

from __future__ import annotations

import pickle

import pytest
import torch
from vision_testlib import TOK, images

from rlvr.models import CharTokenizer
from rlvr.tasks import Problem
from rlvr.tasks.shapes import ImageProblem as ShapesProblem
from rlvr.vision import ImagePrompt, encode_image_problems, image_inputs


def test_each_marker_becomes_a_run_of_placeholders():
    pixels = images(1, seed=0)[0].repeat(2, 1, 1, 1)  # two images
    prompt = TOK.encode_images("a<image>b<image>", pixels)
    # "a" (1 id), 9 placeholders, "b" (1 id), 9 placeholders: spans [1, 10) and [11, 20).
    assert prompt.spans == [(1, 10), (11, 20)] and len(prompt) == 20
    assert prompt[1:10] == [TOK.image_token_id] * 9 and TOK.image_token_id == 98
    assert TOK.decode(prompt) == "ab"
    assert TOK.encode("a<image>b<image>") == list(prompt)  # counted as the model sees it
    assert TOK.decode(prompt, skip_special=False) == "a<image>b<image>"
    longer = prompt + TOK.encode("c")
    assert isinstance(longer, ImagePrompt) and longer.spans == prompt.spans
    assert torch.equal(image_inputs([longer, TOK.encode("x")])["pixel_values"], pixels)


def test_a_marker_count_that_does_not_match_the_images_is_named():
    with pytest.raises(ValueError, match=r"holds 2 <image> marker\(s\) for 1 image\(s\)"):
        TOK.encode_images("<image><image>", images(1, seed=0)[0])


def test_text_only_prompts_are_untouched():
    problem = Problem("u", "Q: 1+2=? A:", "3", " 3")
    assert image_inputs([TOK.encode(problem.prompt)]) == {}
    assert encode_image_problems(TOK, [problem]) == [CharTokenizer().encode(problem.prompt)]
    assert encode_image_problems(CharTokenizer(), [problem]) == [TOK.encode(problem.prompt)]
    shown = ShapesProblem("v", "<image>?", "1", " 1", images(1, seed=0)[0])
    with pytest.raises(ValueError, match="tokenizer \\(CharTokenizer\\) has no image placeholder"):
        encode_image_problems(CharTokenizer(), [problem, shown])


def test_a_pickled_prompt_keeps_its_pixels():
    # Rollouts cross processes (async pipeline, Ray actors) pickled.
    prompt = TOK.encode_images("<image>?", images(1, seed=0)[0])
    back = pickle.loads(pickle.dumps(prompt))
    assert isinstance(back, ImagePrompt) and back == prompt and back.spans == [(0, 9)]
    assert torch.equal(back.pixel_values, prompt.pixel_values)
