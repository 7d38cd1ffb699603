"""Image chunks of a `ModelInput` as the model's prompt (issue 46): each PNG or JPEG
picture becomes its run of image placeholder tokens, and the ids an
`rlvr.vision.ImagePrompt` carrying the pixels, so sampling, `compute_logprobs` and
`forward_backward` see the picture the way rlvr's trainer does (docs/vision.md).

Like LLaVA-1.5's processor, a picture of another size is resized (bicubic) to the
model's square input, so every image takes the model's fixed tokens per image; a
chunk's `expected_tokens` must equal that number. A text model refuses image chunks,
naming the chunk and the model.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.service.types import ModelInput, is_image_chunk
from rlvr.vision import ImagePrompt

FORMATS = ("png", "jpeg")
MAX_IMAGE_SIDE = 4096
"""Pixels on a side a chunk may declare before it is decoded (a decompression bomb's
header claims far more than it sends)."""


@dataclass(frozen=True)
class ImageSpec:
    """What a vision-language model takes per picture."""

    tokens_per_image: int
    image_size: int  # its square input's side, in pixels
    image_token_id: int
    model: str  # the model's name, for messages


def image_spec(model: torch.nn.Module, tokenizer: Any) -> ImageSpec | None:
    """The picture input of `model` (the embedded tiny VLM), None for a text model."""
    vision = getattr(getattr(model, "config", None), "vision", None)
    if vision is None or not hasattr(tokenizer, "encode_images"):
        return None
    return ImageSpec(
        tokenizer.tokens_per_image, vision.image_size, tokenizer.image_token_id, "the tiny VLM"
    )


def has_images(model_input: Any) -> bool:
    """Whether `model_input` (rlvr's, PyTRIO's or Tinker's ModelInput) holds image chunks."""
    return any(is_image_chunk(c) for c in getattr(model_input, "chunks", None) or [])


def model_prompt(
    model_input: Any, vocab_size: int, spec: ImageSpec | None, model_name: str, what: str
) -> list[int]:
    """The ids of `model_input` (`what` names it in messages): its tokens, integers in
    [0, vocab_size), at least one; or, when it holds image chunks, an `ImagePrompt` whose
    placeholder runs stand where the chunks were."""
    if not has_images(model_input):
        ids = text_ids(model_input.to_ints(), vocab_size, what)
    else:
        ids = _image_prompt(model_input.chunks, vocab_size, spec, model_name, what)
    if not ids:
        raise ValueError(f"{what} is empty; it needs at least one token")
    return ids


def text_ids(tokens: Any, vocab_size: int, what: str) -> list[int]:
    try:
        tokens = list(ModelInput(tokens).tokens)  # integers only (security audit F19)
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
    bad = [t for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"{what} token {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return tokens


def _image_prompt(chunks, vocab_size, spec, model_name, what) -> ImagePrompt:
    ids: list[int] = []
    pixels, spans = [], []
    for chunk in chunks:
        if not is_image_chunk(chunk):
            ids += text_ids(chunk.tokens, vocab_size, what)
            continue
        where = f"{what}: image chunk {len(spans)}"
        if spec is None:
            raise ValueError(
                f"{where} ({type(chunk).__name__}, format={getattr(chunk, 'format', None)!r}): "
                f"image chunks need a vision-language model, and {model_name} is a text "
                "model; serve 'embedded:shapes' (the tiny VLM) to send pictures"
            )
        expected = getattr(chunk, "expected_tokens", None)
        if expected is not None and expected != spec.tokens_per_image:
            raise ValueError(
                f"{where} has expected_tokens={expected} but {spec.model} turns a picture "
                f"into {spec.tokens_per_image} tokens"
            )
        pixels.append(decode_image(chunk, spec.image_size, where))
        spans.append((len(ids), len(ids) + spec.tokens_per_image))
        ids += [spec.image_token_id] * spec.tokens_per_image
    return ImagePrompt(ids, torch.stack(pixels), spans)


def decode_image(chunk: Any, size: int, where: str) -> torch.Tensor:
    """The chunk's picture as (3, size, size) RGB values in [0, 1] (value / 255)."""
    from PIL import Image, UnidentifiedImageError  # matplotlib's dependency, so installed

    fmt, data = getattr(chunk, "format", None), getattr(chunk, "data", None)
    if fmt not in FORMATS:
        raise ValueError(f"{where} has format={fmt!r:.40}; it must be one of: {', '.join(FORMATS)}")
    if not isinstance(data, bytes | bytearray) or not data:
        raise ValueError(f"{where}: data must be the picture's {fmt} bytes, got {data!r:.40}")
    try:
        image = Image.open(io.BytesIO(data), formats=[fmt.upper()])
        if max(image.size) > MAX_IMAGE_SIDE:
            raise ValueError(f"it is {image.size[0]}×{image.size[1]}, over {MAX_IMAGE_SIDE}")
        image = image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise ValueError(f"{where} is not a readable {fmt} picture ({err})") from None
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BICUBIC)
    values = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    return values.view(size, size, 3).permute(2, 0, 1).float() / 255  # (3, S, S)
