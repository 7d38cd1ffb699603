"""Prompts that show images: token ids with placeholder runs, carrying their pixels.

An image enters the language model as `tokens_per_image` placeholder tokens whose
embeddings the model replaces by the image's projected patches (LLaVA, arXiv:2304.08485).
The placeholder id is one past the language model's output vocabulary, so it can be fed
but never sampled. Placeholders are prompt tokens: context only, never a response token,
so no loss, mask or normaliser ever sees them (the rule observation tokens follow).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

IMAGE_MARKER = "<image>"
"""Where an image goes in a prompt's text; a prompt holds one marker per image."""
VISION_FILE = "vision_tokenizer.json"


class ImagePrompt(list):
    """A prompt's token ids (a `list[int]`), `pixel_values` (n_images, C, H, W) and
    `spans`: image i fills the placeholder columns [start, end) of `spans[i]`.
    `prompt + more_ids` is still an ImagePrompt with the same images (a multi-turn
    context keeps them); a slice is a plain list (`image_tail` keeps its images).

    A Qwen-VL prompt (`rlvr.vision.qwen_vl`) also has `image_grid_thw` (n_images, 3):
    its `pixel_values` are then the images' flattened patches, (Σ t·h·w, D), image i
    owning t·h·w rows in turn, as Qwen-VL's image processor returns them, and `pictures`
    the pictures themselves, (C, H, W) each in [0, 1], for the completions log to draw
    (`rlvr show`); None where only patches are known."""

    image_grid_thw: torch.Tensor | None = None  # also for one pickled before it existed
    pictures: tuple[torch.Tensor, ...] | None = None

    def __init__(
        self,
        ids: Iterable[int],
        pixel_values: torch.Tensor,
        spans: Sequence[tuple[int, int]],
        image_grid_thw: torch.Tensor | None = None,
        pictures: Sequence[torch.Tensor] | None = None,
    ) -> None:
        super().__init__(ids)
        self.pixel_values = pixel_values
        self.spans = [(int(a), int(b)) for a, b in spans]
        self.image_grid_thw = image_grid_thw
        self.pictures = None if pictures is None else tuple(pictures)
        _check_images(pixel_values, self.spans, image_grid_thw)

    def __add__(self, other: Iterable[int]) -> ImagePrompt:
        grid, pictures = self.image_grid_thw, self.pictures
        return ImagePrompt([*self, *other], self.pixel_values, self.spans, grid, pictures)

    def image(self, i: int) -> torch.Tensor:
        """Image i's pixel values (its rows of patches for a Qwen-VL prompt)."""
        if self.image_grid_thw is None:
            return self.pixel_values[i]
        rows = self.image_grid_thw.prod(-1).tolist()
        start = sum(rows[:i])
        return self.pixel_values[start : start + rows[i]]

    def same_image(self, i: int, other: ImagePrompt, j: int) -> bool:
        """Whether image i here and image j of `other` have the same pixels and grid."""
        grids = (self.image_grid_thw, other.image_grid_thw)
        if (grids[0] is None) != (grids[1] is None):
            return False
        if grids[0] is not None and not torch.equal(grids[0][i], grids[1][j]):
            return False
        return torch.equal(self.image(i), other.image(j))

    def images_at(self, keep: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(pixel_values, image_grid_thw) of the images `keep`, in that order."""
        if self.image_grid_thw is None:
            return self.pixel_values[list(keep)], None
        pixels = torch.cat([self.image(i) for i in keep]) if keep else self.pixel_values[:0]
        return pixels, self.image_grid_thw[list(keep)]


def _check_images(pixels: torch.Tensor, spans: list, grid: torch.Tensor | None) -> None:
    if grid is None:
        if pixels.dim() != 4 or len(pixels) != len(spans):
            raise ValueError(
                f"pixel_values must be (n_images, channels, height, width) with one image "
                f"per span, got shape {tuple(pixels.shape)} for {len(spans)} span(s)"
            )
        return
    if grid.dim() != 2 or grid.shape != (len(spans), 3) or pixels.dim() != 2:
        raise ValueError(
            f"image_grid_thw must be (n_images, 3) with one row per span and pixel_values "
            f"(patches, patch_dim), got {tuple(grid.shape)} and {tuple(pixels.shape)} for "
            f"{len(spans)} span(s)"
        )
    if int(grid.prod(-1).sum()) != len(pixels):
        raise ValueError(
            f"image_grid_thw counts {int(grid.prod(-1).sum())} patches but pixel_values "
            f"holds {len(pixels)} rows"
        )


def image_tail(prompt: Sequence[int], start: int) -> list[int]:
    """`prompt[start:]`, an `ImagePrompt` with the images whose spans lie there when any
    do; `start` must not cut a span (`shared_prefix` never does)."""
    tail = list(prompt[start:])
    if not isinstance(prompt, ImagePrompt):
        return tail
    if any(a < start < b for a, b in prompt.spans):
        raise ValueError(f"column {start} cuts an image's placeholders {prompt.spans}")
    keep = [i for i, (a, _) in enumerate(prompt.spans) if a >= start]
    if not keep:
        return tail
    spans = [(a - start, b - start) for a, b in (prompt.spans[i] for i in keep)]
    pixels, grid = prompt.images_at(keep)
    return ImagePrompt(tail, pixels, spans, grid)


def shared_prefix(cached: Sequence[int], prompt: Sequence[int], length: int) -> int:
    """How many of the `length` leading ids `cached` and `prompt` share a KV cache built
    for `cached` can serve `prompt`: placeholder ids are equal for every image, so the
    prefix ends before the first image of `prompt` that `cached` does not show with the
    same pixels in the same span, and before any image that `length` would cut."""
    if not isinstance(prompt, ImagePrompt):
        return length
    for i, (a, b) in enumerate(prompt.spans):
        if a >= length:
            break
        same = (
            isinstance(cached, ImagePrompt)
            and i < len(cached.spans)
            and cached.spans[i] == (a, b)
            and prompt.same_image(i, cached, i)
        )
        if not same or b > length:
            return a
    return length


def image_inputs(prompts: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
    """The extra forward inputs of a batch whose rows are `prompts`, in row order:
    `{"pixel_values": (N, C, H, W)}` with every row's images in turn, or `{}` when no
    row shows an image (a text-only forward gets exactly the arguments it always had).
    Qwen-VL prompts add `"image_grid_thw"`: (n_images, 3), every row's images in turn."""
    shown = [p for p in prompts if isinstance(p, ImagePrompt)]
    if not shown:
        return {}
    inputs = {"pixel_values": torch.cat([p.pixel_values for p in shown])}
    grids = [p.image_grid_thw for p in shown if p.image_grid_thw is not None]
    if grids:
        if len(grids) != len(shown):
            raise ValueError("a batch mixes Qwen-VL image prompts with other image prompts")
        inputs["image_grid_thw"] = torch.cat(grids)
    return inputs


class VisionTokenizer:
    """A text tokenizer plus the image placeholder: `encode`/`decode` as the text one's
    (placeholders decode to nothing, or to `IMAGE_MARKER` per image with
    `skip_special=False`), and `encode_images` for a prompt with `IMAGE_MARKER`s."""

    def __init__(self, text: Any, tokens_per_image: int) -> None:
        self.text = text
        self.tokens_per_image = tokens_per_image
        self.image_token_id = text.vocab_size  # one past the LM head: fed, never sampled
        self.pad_token_id = text.pad_token_id
        self.eos_token_id = text.eos_token_id

    @property
    def vocab_size(self) -> int:
        """The language model's output vocabulary (the placeholder is not in it)."""
        return self.text.vocab_size

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, each `IMAGE_MARKER` a run of placeholders (so a prompt's
        length counts its images; a forward given them without pixels refuses)."""
        return self._encode_with_spans(text)[0]

    def _encode_with_spans(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        parts = text.split(IMAGE_MARKER)
        ids, spans = self.text.encode(parts[0]), []
        for part in parts[1:]:
            spans.append((len(ids), len(ids) + self.tokens_per_image))
            ids += [self.image_token_id] * self.tokens_per_image + self.text.encode(part)
        return ids, spans

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        if skip_special:
            kept = [i for i in ids if int(i) != self.image_token_id]
            return self.text.decode(kept, skip_special=True)
        return self._decode_marked(ids)

    def _decode_marked(self, ids: Sequence[int]) -> str:
        """Text with `IMAGE_MARKER` where each image's run of placeholders was."""
        pieces: list[str] = []
        text_run: list[int] = []
        placeholders = 0  # of the current image so far
        for i in map(int, ids):
            if i != self.image_token_id:
                text_run.append(i)
                placeholders = 0
                continue
            if placeholders % self.tokens_per_image == 0:  # a new image starts
                pieces += [self.text.decode(text_run, skip_special=False), IMAGE_MARKER]
                text_run = []
            placeholders += 1
        pieces.append(self.text.decode(text_run, skip_special=False))
        return "".join(pieces)

    def encode_images(self, text: str, pixel_values: torch.Tensor) -> ImagePrompt:
        """`text` whose k-th `IMAGE_MARKER` becomes `tokens_per_image` placeholders for
        image k of `pixel_values` (n_images, C, H, W)."""
        ids, spans = self._encode_with_spans(text)
        if len(spans) != len(pixel_values):
            raise ValueError(
                f"the prompt holds {len(spans)} {IMAGE_MARKER} marker(s) for "
                f"{len(pixel_values)} image(s); put one marker where each image goes: "
                f"{text[:60]!r}"
            )
        return ImagePrompt(ids, pixel_values, spans)

    def save(self, directory: str | Path) -> None:
        self.text.save(directory)
        (Path(directory) / VISION_FILE).write_text(
            json.dumps({"tokens_per_image": self.tokens_per_image})
        )

    @classmethod
    def load(cls, directory: str | Path, text: Any) -> VisionTokenizer:
        """The tokenizer `save` wrote, over the text tokenizer `text` loaded from there."""
        saved = json.loads((Path(directory) / VISION_FILE).read_text())
        return cls(text, int(saved["tokens_per_image"]))


def encode_image_problems(tokenizer: Any, problems: Sequence[Any]) -> list[list[int]]:
    """Each problem's prompt as ids, as the engine sees it: an `ImagePrompt` for one with
    `pixel_values`, `tokenizer.encode(prompt)` otherwise (so a text task's ids are
    exactly what they always were). A tokenizer without image placeholders is refused
    for a problem that shows images, naming the fix."""
    shows_images = any(getattr(p, "pixel_values", None) is not None for p in problems)
    if shows_images and not hasattr(tokenizer, "encode_images"):
        raise ValueError(
            f"the task's prompts show images but the policy's tokenizer "
            f"({type(tokenizer).__name__}) has no image placeholder: use model: embedded, "
            f"which builds the tiny vision-language model for an image task"
        )
    return [
        tokenizer.encode(p.prompt)
        if getattr(p, "pixel_values", None) is None
        else tokenizer.encode_images(p.prompt, p.pixel_values)
        for p in problems
    ]
