"""Pictures in the completions table and in `rlvr show` (issue 46, item 5): a row whose
prompt shows an image records it as a PNG (decoded here by a reader written from the
format's definition, and by Pillow where installed); text rows are byte-identical to
what they were; the page draws the picture as a data URI beside the prompt, the terminal
prints `[image 24×24]`; a record whose image is not a PNG gets a marker, never an <img>."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import zlib

import pytest
import torch
from show_testlib import single_turn_row, write_run

from rlvr.algo import PreparedBatch
from rlvr.runlog.completions import CompletionsLog, image_record, png_bytes, read_completions
from rlvr.show.browser import find_browser, screenshot
from rlvr.show.html_run import write_run_page
from rlvr.show.load import load_run
from rlvr.show.text import row_lines
from rlvr.tasks.shapes import draw
from rlvr.train.collect import Collected
from rlvr.train.records.completion_rows import completion_rows
from rlvr.train.records.rollout_record import Rollout
from rlvr.vision import ImagePrompt

# Two squares on the 24×24 picture: cell 0 (rows and columns 0..5) in colour 0
# (1.0, 0.2, 0.2) and cell 5 (rows and columns 6..11) in colour 2 (0.3, 0.4, 1.0).
PICTURE = draw(((0, 6, 0, 0, 0), (5, 6, 0, 0, 2)), image_size=24, cell=6)  # (3, 24, 24)
# Their 8-bit values, round(255·x): 0.2·255 = 51, 0.4·255 = 102, 1.0·255 = 255; 0.3·255
# is 76.5 in float32 and torch rounds a half to even, 76. The background is 0.
RED, BLUE, BLACK = (255, 51, 51), (76, 102, 255), (0, 0, 0)
# A decoded value v/255 is within 0.5/255 of x (rounding to the nearest of 256 levels),
# plus float32's rounding of x·255 (half an ulp of 255, 2⁻¹⁷, over 255: 3e-8) and of
# v/255 (2⁻²⁵ relative: 3e-8); 1e-7 covers both.
QUANTISATION_ATOL = 0.5 / 255 + 1e-7


def read_png(data: str | bytes) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """(width, height, rows of RGB pixels) of an 8-bit RGB, non-interlaced PNG whose
    scanlines are unfiltered (what `png_bytes` writes); anything else fails an assertion,
    so the writer cannot drift from the format unnoticed."""
    raw = base64.b64decode(data, validate=True) if isinstance(data, str) else data
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, []
    while at < len(raw):
        (length,) = struct.unpack(">I", raw[at : at + 4])
        kind, body = raw[at + 4 : at + 8], raw[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", raw[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        at += 12 + length
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour, *rest = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, rest) == (8, 2, [0, 0, 0])  # 8-bit RGB, no interlace
    pixels = zlib.decompress(chunks[1][1])
    stride = 1 + 3 * width
    assert len(pixels) == stride * height
    rows = []
    for y in range(height):
        line = pixels[y * stride : (y + 1) * stride]
        assert line[0] == 0  # filter type None
        rows.append([tuple(line[1 + 3 * x : 4 + 3 * x]) for x in range(width)])
    return width, height, rows


def as_tensor(rows: list[list[tuple[int, ...]]]) -> torch.Tensor:
    """Decoded rows as a (3, H, W) picture in [0, 1]."""
    return torch.tensor(rows, dtype=torch.float32).permute(2, 0, 1) / 255


def test_a_picture_is_recorded_as_its_png() -> None:
    record = image_record(PICTURE)
    assert (record["width"], record["height"]) == (24, 24)
    width, height, rows = read_png(record["png"])
    assert (width, height) == (24, 24)
    assert rows[0][0] == rows[5][5] == RED and rows[0][6] == rows[6][0] == BLACK
    assert rows[6][6] == rows[11][11] == BLUE and rows[12][12] == rows[23][23] == BLACK
    assert rows[6][5] == rows[5][6] == BLACK
    assert torch.allclose(as_tensor(rows), PICTURE, rtol=0, atol=QUANTISATION_ATOL)
    # Compact: the table holds a few of these per step (measured: under 200 characters).
    assert len(record["png"]) < 300


def test_pillow_reads_the_same_pixels() -> None:
    image = pytest.importorskip("PIL.Image")
    png = base64.b64decode(image_record(PICTURE)["png"])
    opened = image.open(io.BytesIO(png))
    assert opened.mode == "RGB" and opened.size == (24, 24)
    assert [opened.getpixel((x, x)) for x in (0, 6, 12)] == [RED, BLUE, BLACK]


def test_grey_and_out_of_range_values_hand_worked() -> None:
    # One channel is drawn grey; values clamp to [0, 1]: -0.5 → 0, 2 → 255, 0.5·255 =
    # 127.5 rounds (half to even) to 128.
    grey = torch.tensor([[[-0.5, 2.0, 0.5]]])  # (1, 1, 3)
    _, _, rows = read_png(image_record(grey)["png"])
    assert rows == [[(0, 0, 0), (255, 255, 255), (128, 128, 128)]]
    with pytest.raises(ValueError, match=r"1 or 3 channels, got shape \(2, 4, 4\)"):
        image_record(torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match="5 bytes is not a 1×2 RGB image"):
        png_bytes(b"12345", 1, 2)


def _rollout(prompts: list[list[int]]) -> Collected:
    """Four one-turn rows of two groups over `prompts`; rows 2 and 3 are dropped."""
    generated = Rollout(
        prompt_ids=prompts,
        response_ids=torch.tensor([[2, 3], [4, 0], [5, 6], [7, 8]]),
        response_mask=torch.tensor([[1.0, 1], [1, 0], [1, 1], [1, 1]]),
        sampler_logprobs=torch.zeros(4, 2),
        truncated=torch.tensor([False, False, False, True]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        problem_uids=["p0", "p0", "p1", "p1"],
        texts=["cd", "e", "fg", "hi"],
        correct=torch.tensor([1.0, 0, 1, 0]),
        formatted=torch.tensor([1.0, 0, 1, 1]),
        rewards=torch.tensor([1.0, 0, 1, 0]),
    )
    return Collected(generated, generated.select(torch.tensor([0, 1])), 0, 0.0, 0.0, {})


def _rows(prompts: list[list[int]]) -> list[dict]:
    prepared = PreparedBatch(
        keep=torch.tensor([True, True]),
        shaped_rewards=torch.tensor([1.0, 0.0]),
        response_mask=torch.tensor([[1.0, 1], [1, 0]]),
        advantages=torch.tensor([[0.5, 0.5], [-0.5, 0]]),
        loss_weights=torch.zeros(2, 2),
        nll_weights=None,
        returns=None,
    )
    letters = "abcdefghij"
    decode = lambda ids: "".join(letters[i] for i in ids if i < len(letters))  # noqa: E731
    return completion_rows(_rollout(prompts), prepared, decode, step=3, seed=0, count=4)


def test_text_rows_are_byte_identical_and_an_image_row_adds_its_pictures(tmp_path) -> None:
    # The placeholder id 10 decodes to nothing, as VisionTokenizer's does.
    shown = ImagePrompt([10, 10, 0, 1], PICTURE[None], [(0, 2)])
    text_rows = _rows([[0, 1]] * 4)
    mixed_rows = _rows([shown, shown, [0, 1], [0, 1]])  # group 0 shows the picture
    for name, rows in (("text", text_rows), ("mixed", mixed_rows)):
        CompletionsLog(tmp_path / name, every=1, rows=4, resumed_step=None).write(3, rows)
    text_lines = (tmp_path / "text/completions/step_000003.jsonl").read_bytes().splitlines()
    mixed_lines = (tmp_path / "mixed/completions/step_000003.jsonl").read_bytes().splitlines()
    assert mixed_lines[2:] == text_lines[2:]  # group 1: text prompts, the same bytes
    assert all(b'"images"' not in line for line in text_lines)
    read = read_completions(tmp_path / "mixed", 3)
    for with_image, without in zip(read[:2], text_rows[:2], strict=True):
        assert {k: v for k, v in with_image.items() if k != "images"} == without
        assert [(i["width"], i["height"]) for i in with_image["images"]] == [(24, 24)]
        _, _, rows = read_png(with_image["images"][0]["png"])
        assert torch.allclose(as_tensor(rows), PICTURE, rtol=0, atol=QUANTISATION_ATOL)


def _image_run(tmp_path, png: str | None = None):
    """The hand-written run of show_testlib whose step 4 gains a row showing PICTURE
    (or, given `png`, an `images` record holding that text instead of its PNG)."""
    run = write_run(tmp_path / "run", steps=(2, 4))
    record = image_record(PICTURE)
    if png is not None:
        record["png"] = png
    row = {**single_turn_row(4, 3, 0, True), "prompt": "How many shapes? A:"}
    row["images"] = [record]
    with (run / "completions/step_000004.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    return run


def test_the_page_draws_the_picture_beside_its_prompt(tmp_path) -> None:
    run = _image_run(tmp_path)
    write_run_page(load_run(run), run / "show.html")
    page = (run / "show.html").read_text()
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"([^>]*)>', page)
    assert len(images) == 1  # only the image row; the text rows are drawn as before
    png, attributes = images[0]
    _, _, rows = read_png(png)
    assert torch.allclose(as_tensor(rows), PICTURE, rtol=0, atol=QUANTISATION_ATOL)
    assert 'width="96" height="96" alt="image 1 of 1, 24×24"' in attributes  # drawn 4×
    beside = re.search(
        r'<div class="with-images"><div class="images"><img [^>]*></div>'
        r'<pre class="prompt">How many shapes\? A:</pre></div>',
        page,
    )
    assert beside is not None
    assert page.count('<pre class="prompt">Q: 59+63=? A:</pre>') == 6  # text rows: bare


def test_the_terminal_marks_the_picture(tmp_path) -> None:
    run = _image_run(tmp_path)
    image_row, *_ = [r for r in load_run(run).rows(4) if r.get("images")]
    lines = row_lines(image_row, color=False)
    assert lines[1:3] == ["  prompt      How many shapes? A:", "  images      [image 24×24]"]
    text_row = single_turn_row(4, 0, 0, True)
    assert not any("image" in line for line in row_lines(text_row, color=False))


@pytest.mark.parametrize(
    "png",
    [
        '" onerror="alert(1)',  # not base64: would leave the attribute
        base64.b64encode(b"<svg onload=alert(1)>").decode(),  # base64, but not a PNG
    ],
)
def test_an_image_that_is_not_a_png_gets_a_marker(tmp_path, png) -> None:
    run = _image_run(tmp_path, png)
    write_run_page(load_run(run), run / "show.html")
    page = (run / "show.html").read_text()
    assert "<img" not in page and "onerror" not in page.replace("&quot;", "")
    assert '<span class="bad">[image 24×24, unreadable]</span>' in page


BROWSER = find_browser()


@pytest.mark.skipif(BROWSER is None, reason="no browser to draw the page in (Debian: chromium)")
def test_a_browser_draws_the_picture(tmp_path) -> None:
    """The page's CSP lets the data URI through and the picture is drawn: the screenshot
    holds a block of the blue square's colour at least 4×6 = 24 pixels wide."""
    image = pytest.importorskip("PIL.Image")
    run = _image_run(tmp_path)
    write_run_page(load_run(run), run / "show.html")
    shot = image.open(screenshot(run / "show.html", tmp_path / "shot.png", BROWSER, (1100, 3000)))
    rgb = shot.convert("RGB")
    blue = [
        (x, y) for y in range(rgb.height) for x in range(rgb.width) if rgb.getpixel((x, y)) == BLUE
    ]
    assert blue, "the blue square is not on the screenshot"
    xs = sorted({x for x, _ in blue})
    assert xs[-1] - xs[0] + 1 >= 24
