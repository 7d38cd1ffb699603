"""Counting shapes in a picture: ``<image>How many shapes? A:`` answered by `` \\boxed{3}``.

The embedded vision-language model's task (issue 46). Each image is a black
``image_size``² RGB square cut into a grid of ``cell``-pixel cells; ``count`` of the cells
(1 to ``max_count``) hold one filled square each, of a random colour, side (``min_side`` to
``cell`` pixels) and offset in its cell. The answer is the number of squares, a verifiable
integer. A cell is as big as the vision encoder's patch, so a shape never spans two
patches. By default a square fills its cell: with smaller squares (``min_side`` < cell)
the tiny VLM stayed at chance (dev accuracy 0.26 after 600 warm-start steps, measured),
while full cells reach 0.66 within 250.
Problems are drawn from ``seed`` alone, deduplicated by their picture, the eval split
first, then dev, then train (as every synthetic task's).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from rlvr.checks import check_int
from rlvr.tasks.arithmetic import check_integer_answer, format_answer
from rlvr.tasks.base import Problem, Task, alphabet_of, check_size, check_split
from rlvr.verify import Verdict

PROMPT = "<image>How many shapes? A:"  # rlvr.vision.IMAGE_MARKER marks the image
COLOURS = ((1.0, 0.2, 0.2), (0.2, 1.0, 0.2), (0.3, 0.4, 1.0), (1.0, 1.0, 0.3))

Layout = tuple[tuple[int, int, int, int, int], ...]  # per shape: cell, side, dy, dx, colour


@dataclass(frozen=True)
class ImageProblem(Problem):
    """A problem whose prompt shows images: `pixel_values` (n_images, C, H, W), one per
    marker in `prompt` (the sampler turns both into an `rlvr.vision.ImagePrompt`)."""

    pixel_values: torch.Tensor | None = field(default=None, compare=False, repr=False)


def draw(layout: Layout, image_size: int, cell: int) -> torch.Tensor:
    """The (3, image_size, image_size) picture of `layout`, values in [0, 1]."""
    image = torch.zeros(3, image_size, image_size)
    per_row = image_size // cell
    for index, side, dy, dx, colour in layout:
        top, left = (index // per_row) * cell + dy, (index % per_row) * cell + dx
        image[:, top : top + side, left : left + side] = torch.tensor(COLOURS[colour])[
            :, None, None
        ]
    return image


class ShapesTask(Task):
    """How many squares the picture shows; see the module docstring."""

    name = "shapes"
    shows_images = True  # the embedded policy for it is the tiny VLM (rlvr.warmstart)

    def __init__(
        self,
        max_count: int = 4,
        image_size: int = 24,
        cell: int = 6,
        min_side: int | None = None,
        seed: int = 0,
        train_size: int = 2000,
        dev_size: int = 100,
        eval_size: int = 200,
    ) -> None:
        """
        Args:
            max_count: the most shapes a picture holds (at least 1, at most the cells).
            image_size: side of the picture in pixels, a multiple of ``cell``.
            cell: side of a grid cell in pixels, at least 2.
            min_side: the smallest square's side, 1 to ``cell`` (None: ``cell``, every
                square fills its cell).
            seed: the only source of randomness for the splits.
            train_size, dev_size, eval_size: problems per split.
        """
        check_int("cell", cell, 2)
        min_side = cell if min_side is None else min_side
        check_int("min_side", min_side, 1, cell)
        check_int("image_size", image_size, cell)
        if image_size % cell:
            raise ValueError(f"image_size={image_size} must be a multiple of cell={cell}")
        check_int("max_count", max_count, 1, (image_size // cell) ** 2)
        self.max_count, self.image_size, self.cell, self.seed = max_count, image_size, cell, seed
        self.min_side = min_side
        self.sizes = {
            "eval": check_size("eval_size", eval_size),
            "dev": check_size("dev_size", dev_size),
            "train": check_size("train_size", train_size),
        }
        self._splits: dict[str, list[ImageProblem]] | None = None

    def sample(self, rng: random.Random) -> Layout:
        """One picture's shapes, sorted by cell (the picture's identity)."""
        cells = rng.sample(
            range((self.image_size // self.cell) ** 2), rng.randint(1, self.max_count)
        )
        shapes = []
        for index in sorted(cells):
            side = rng.randint(self.min_side, self.cell)
            dy, dx = rng.randint(0, self.cell - side), rng.randint(0, self.cell - side)
            shapes.append((index, side, dy, dx, rng.randrange(len(COLOURS))))
        return tuple(shapes)

    def problems(self, split: str) -> list[Problem]:
        check_split(split)
        if self._splits is None:
            self._splits = self._draw_splits()
        return list(self._splits[split])

    def _draw_splits(self) -> dict[str, list[ImageProblem]]:
        rng, seen, splits = random.Random(self.seed), set(), {}
        for split, size in self.sizes.items():  # eval, dev, train
            chunk: list[ImageProblem] = []
            while len(chunk) < size:
                layout = self.sample(rng)
                if layout in seen:
                    continue
                seen.add(layout)
                answer = str(len(layout))
                pixels = draw(layout, self.image_size, self.cell)[None]  # (1, 3, S, S)
                uid = f"{self.name}/{split}/{len(chunk)}"
                target = " " + format_answer(answer, "boxed")
                chunk.append(ImageProblem(uid, PROMPT, answer, target, pixels))
            splits[split] = chunk
        return splits

    def check(self, problem: Problem, completion: str) -> Verdict:
        return check_integer_answer(problem.answer, completion, "boxed")

    @property
    def longest_target_chars(self) -> int:
        return len(" " + format_answer(str(self.max_count), "boxed"))

    @property
    def alphabet(self) -> str:
        return alphabet_of(PROMPT, "0123456789", format_answer("", "boxed"))
