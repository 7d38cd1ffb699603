"""Image prompts and the embedded tiny vision-language model (issue 46).

A prompt that shows images is an `ImagePrompt`: its token ids, in which each image is a
run of placeholder tokens, carrying the pixels those placeholders stand for. Because the
pixels ride on the ids, they travel wherever a row's prompt travels (the sampler, the
`Rollout` record, π_old, π_ref, the trainer's micro-batches) with no new argument; a
forward turns them into model inputs with `image_inputs`. `TinyVLM` is a LLaVA-style model
(arXiv:2304.08485): a small ViT, an MLP projector and the embedded Qwen2 language model.
`rlvr.vision.qwen_vl` loads a Hugging Face Qwen2-VL by path, with its multimodal rotary
positions.
"""

from rlvr.vision.model import TinyVLM, TinyVLMConfig, VisionSettings
from rlvr.vision.prompts import (
    IMAGE_MARKER,
    ImagePrompt,
    VisionTokenizer,
    encode_image_problems,
    image_inputs,
)

__all__ = [
    "IMAGE_MARKER",
    "ImagePrompt",
    "TinyVLM",
    "TinyVLMConfig",
    "VisionSettings",
    "VisionTokenizer",
    "encode_image_problems",
    "image_inputs",
]
