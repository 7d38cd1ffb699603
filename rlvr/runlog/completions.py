"""The completions table's files: `RUN/completions/step_{step:06d}.jsonl`, one JSON object
per row (`rlvr.train.records.completion_rows` makes them; docs/metrics.md gives the
schema), and `RUN/completions/index.json`, the steps written. The trackers that have
tables get the same rows.

A row whose prompt shows images (an `rlvr.vision.ImagePrompt`) also records them:
`"images": [{"width", "height", "png"}]`, each picture an 8-bit RGB PNG in base64
(`prompt_images`), so `rlvr show` can draw it; a text row has no `images` key at all."""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `rlvr show` reads these files without importing torch
    import torch

SCHEMA = 1
FOLDER = "completions"


class CompletionsLog:
    """`RUN/completions/`: a step's rows, and the index of the steps written.

    A resumed run redoes the steps after its checkpoint: their files, written by the
    interrupted invocation, are removed when it starts (`resumed_step`), so every file
    there is one the run as a whole wrote once."""

    def __init__(self, out: Path, every: int, rows: int, resumed_step: int | None) -> None:
        self.folder = out / FOLDER
        self.every, self.rows = every, rows
        if resumed_step is not None and self.folder.is_dir():
            for step in self.steps():
                if step > resumed_step:
                    (self.folder / step_file(step)).unlink()
            self._write_index()

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def steps(self) -> list[int]:
        """The steps whose files are in the folder."""
        names = self.folder.glob("step_*.jsonl") if self.folder.is_dir() else []
        return sorted(int(p.stem.removeprefix("step_")) for p in names)

    def write(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        _write_atomic(self.folder / step_file(step), text)
        self._write_index()

    def _write_index(self) -> None:
        index = {"schema": SCHEMA, "every": self.every, "rows_per_step": self.rows}
        _write_atomic(self.folder / "index.json", json.dumps({**index, "steps": self.steps()}))


def step_file(step: int) -> str:
    return f"step_{step:06d}.jsonl"


def read_completions(out: str | Path, step: int) -> list[dict[str, Any]]:
    """The rows written for `step` in the run directory `out`."""
    path = Path(out) / FOLDER / step_file(step)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def prompt_images(prompt: Sequence[int]) -> dict[str, Any]:
    """`{"images": [...]}` for a prompt that carries `pixel_values` (n_images, C, H, W)
    or, a Qwen-VL prompt whose `pixel_values` are patches, its `pictures`; one
    `image_record` per image; `{}` for a text prompt, so its row is unchanged, and for
    patches without their pictures."""
    pixels = getattr(prompt, "pictures", None)
    if pixels is None and getattr(prompt, "image_grid_thw", None) is None:
        pixels = getattr(prompt, "pixel_values", None)
    if pixels is None:
        return {}
    return {"images": [image_record(image) for image in pixels]}


def image_record(image: torch.Tensor) -> dict[str, Any]:
    """One picture (C, H, W), values in [0, 1], C 1 or 3, as `{"width", "height", "png"}`:
    `png` the base64 of an 8-bit RGB PNG whose value v is round(255·clamp(x, 0, 1)), so a
    decoded pixel v/255 is within 0.5/255 of x (exact for multiples of 1/255)."""
    if image.dim() != 3 or image.shape[0] not in (1, 3):
        raise ValueError(
            f"an image must be (channels, height, width) with 1 or 3 channels, got shape "
            f"{tuple(image.shape)}"
        )
    rgb = image.detach().float().cpu().expand(3, -1, -1)
    values = (rgb.clamp(0, 1) * 255).round().byte().permute(1, 2, 0)  # (H, W, 3)
    height, width = int(values.shape[0]), int(values.shape[1])
    png = png_bytes(bytes(values.flatten().tolist()), width, height)
    return {"width": width, "height": height, "png": base64.b64encode(png).decode("ascii")}


def png_bytes(rgb: bytes, width: int, height: int) -> bytes:
    """An 8-bit RGB PNG (ISO/IEC 15948) of `rgb`, rows top to bottom, 3 bytes a pixel;
    every scanline unfiltered (filter type 0): for a 24×24 picture the deflate stream is
    already a few hundred bytes, and the writer stays a dozen lines."""
    stride = 3 * width
    if len(rgb) != stride * height:
        raise ValueError(
            f"{len(rgb)} bytes is not a {width}×{height} RGB image ({stride * height})"
        )
    raw = b"".join(b"\x00" + rgb[y * stride : (y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        _chunk(kind, data)
        for kind, data in ((b"IHDR", header), (b"IDAT", zlib.compress(raw, 9)), (b"IEND", b""))
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
