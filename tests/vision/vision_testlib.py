"""A small TinyVLM, its tokenizer and image prompts, shared by tests/vision."""

from __future__ import annotations

import torch
from rounding_testlib import RANDOM_LOGIT_SCALE, forward_terms, reorder_atol

from rlvr.models import CharTokenizer, tiny_qwen2_config
from rlvr.train.records.rollout_record import Rollout
from rlvr.vision import VisionSettings, VisionTokenizer
from rlvr.vision.model import build_tiny_vlm

VISION = VisionSettings(image_size=12, patch_size=4, hidden=16, layers=1, heads=2)  # 9 patches
TOK = VisionTokenizer(CharTokenizer(), VISION.tokens_per_image)


def small_vlm(seed: int = 0):
    text = tiny_qwen2_config(
        CharTokenizer().vocab_size, hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64
    )
    return build_tiny_vlm(text, VISION, seed)


def images(count: int, seed: int) -> torch.Tensor:
    """(count, 1, 3, 12, 12) random images in [0, 1), one per prompt."""
    return torch.rand(count, 1, 3, 12, 12, generator=torch.Generator().manual_seed(seed))


def vlm_logprob_atol(model) -> float:
    """Two forwards of the VLM that add in other orders: n·ε·M (rounding_testlib.py) with n
    the text model's chain (`forward_terms`) plus the ViT's in front of it: the patch
    embedding (C·p² terms), per layer q/k/v and output projections (hidden each), softmax
    and weighted sum over the P patches, the MLP (hidden, 4·hidden), then the projector
    (vision hidden, text hidden). M: a random tiny model's logit scale."""
    v, text = model.config.vision, model.config.text
    per_layer = 4 * v.hidden + 2 * v.tokens_per_image + 5 * v.hidden
    vision = v.channels * v.patch_size**2 + v.layers * per_layer + v.hidden + text.hidden_size
    return reorder_atol(forward_terms(text) + vision, RANDOM_LOGIT_SCALE)


def rollout_of(gen, prompt_ids=None) -> Rollout:
    """A sampled batch as the trainer's record (zero rewards), with `prompt_ids` in place
    of the sampler's (None: its own), e.g. the same ids showing other pixels."""
    zeros = torch.zeros(len(gen.prompt_ids))
    return Rollout(
        prompt_ids=gen.prompt_ids if prompt_ids is None else prompt_ids,
        response_ids=gen.response_ids,
        response_mask=gen.response_mask,
        sampler_logprobs=gen.sampler_logprobs,
        truncated=gen.truncated,
        group_ids=gen.prompt_index,
        problem_uids=[str(i) for i in gen.prompt_index.tolist()],
        texts=gen.texts,
        correct=zeros,
        formatted=zeros,
        rewards=zeros,
    )
