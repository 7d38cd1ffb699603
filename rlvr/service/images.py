"""Image chunks of a `ModelInput` as the model's prompt (issue 46): each PNG or JPEG
picture becomes its run of image placeholder tokens, and the ids an
`rlvr.vision.ImagePrompt` carrying the pixels, so sampling, `compute_logprobs` and
`forward_backward` see the picture the way rlvr's trainer does (docs/vision.md).

For the tiny VLM, like LLaVA-1.5's processor, a picture of another size is resized
(bicubic) to the model's square input, so every image takes the model's fixed tokens per
image. A Qwen2-VL model by path (`rlvr.vision.qwen_vl`) reads each picture with its own
image processor, so a picture takes patches // merge² tokens, as the PyTRIO SDK's
callers count them. A chunk's `expected_tokens` must equal that number. A text model
refuses image chunks, naming the chunk and the model.
"""

from __future__ import annotations

import io
from collections.abc import Callable
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
    encode: Callable[[Any], tuple[torch.Tensor, torch.Tensor, int]] | None = None
    """A PIL picture → (patch rows, grid (1, 3), tokens): the model's own processor
    (Qwen-VL); None: resize to `image_size` and take `tokens_per_image`."""


def image_spec(model: torch.nn.Module, tokenizer: Any) -> ImageSpec | None:
    """The picture input of `model` (the embedded tiny VLM or a Qwen2-VL model), None
    for a text model."""
    images = getattr(tokenizer, "images", None)
    if callable(images) and hasattr(tokenizer, "image_token_id"):  # QwenVLTokenizer
        name = getattr(model.config, "model_type", type(model).__name__)
        return ImageSpec(0, 0, tokenizer.image_token_id, name, images)
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
        ids = _no_placeholder(text_ids(model_input.to_ints(), vocab_size, what), spec, what)
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


def _no_placeholder(tokens: list[int], spec: ImageSpec | None, what: str) -> list[int]:
    """`tokens`, refused when one is the model's image placeholder (a Qwen-VL's
    <|image_pad|> is in its vocabulary): a picture's tokens come from its image chunk."""
    if spec is not None and spec.image_token_id in tokens:
        raise ValueError(
            f"{what} token {tokens.index(spec.image_token_id)} of a text chunk is "
            f"{spec.image_token_id}, {spec.model}'s image placeholder; send the picture "
            "as an image chunk, which stands for its placeholders"
        )
    return tokens


def _image_prompt(chunks, vocab_size, spec, model_name, what) -> ImagePrompt:
    ids: list[int] = []
    pixels, grids, spans = [], [], []
    for chunk in chunks:
        if not is_image_chunk(chunk):
            ids += _no_placeholder(text_ids(chunk.tokens, vocab_size, what), spec, what)
            continue
        where = f"{what}: image chunk {len(spans)}"
        if spec is None:
            raise ValueError(
                f"{where} ({type(chunk).__name__}, format={getattr(chunk, 'format', None)!r}): "
                f"image chunks need a vision-language model, and {model_name} is a text "
                "model; serve 'embedded:shapes' (the tiny VLM) or a Qwen2-VL directory to "
                "send pictures"
            )
        if spec.encode is None:
            picture, grid, tokens = decode_image(chunk, spec.image_size, where), None, None
        else:
            picture, grid, tokens = spec.encode(open_image(chunk, where))
        tokens = spec.tokens_per_image if tokens is None else tokens
        expected = getattr(chunk, "expected_tokens", None)
        if expected is not None and expected != tokens:
            raise ValueError(
                f"{where} has expected_tokens={expected} but {spec.model} turns a picture "
                f"into {tokens} tokens"
            )
        pixels.append(picture)
        grids.append(grid)
        spans.append((len(ids), len(ids) + tokens))
        ids += [spec.image_token_id] * tokens
    if spec.encode is not None:  # Qwen-VL: patch rows and each picture's grid
        return ImagePrompt(ids, torch.cat(pixels), spans, torch.cat(grids))
    return ImagePrompt(ids, torch.stack(pixels), spans)


def decode_image(chunk: Any, size: int, where: str) -> torch.Tensor:
    """The chunk's picture as (3, size, size) RGB values in [0, 1] (value / 255)."""
    from PIL import Image

    image = open_image(chunk, where)
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BICUBIC)
    values = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    return values.view(size, size, 3).permute(2, 0, 1).float() / 255  # (3, S, S)


def open_image(chunk: Any, where: str) -> Any:
    """The chunk's picture as an RGB PIL image, its format and size checked."""
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
        return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise ValueError(f"{where} is not a readable {fmt} picture ({err})") from None
