"""The shapes task (rlvr.tasks.shapes): a picture drawn by hand, deterministic disjoint
splits, the verifier, and the embedded policy it gets (the tiny VLM)."""

from __future__ import annotations

import torch

from rlvr.tasks import make_task
from rlvr.tasks.shapes import COLOURS, ImageProblem, draw


def test_a_layout_is_drawn_where_its_cells_say():
    # 12-pixel picture, 6-pixel cells (2 per row): shape 0 in cell 0 at (1, 2), side 2, red;
    # shape 1 in cell 3 (row 1, column 1) at (6+0, 6+3), side 3, blue.
    image = draw(((0, 2, 1, 2, 0), (3, 3, 0, 3, 2)), image_size=12, cell=6)
    assert image.shape == (3, 12, 12)
    red, blue = torch.tensor(COLOURS[0]), torch.tensor(COLOURS[2])
    assert torch.equal(image[:, 1, 2], red) and torch.equal(image[:, 2, 3], red)
    assert torch.equal(image[:, 6, 9], blue) and torch.equal(image[:, 8, 11], blue)
    lit = (image.abs().sum(0) > 0).sum()
    assert lit == 2 * 2 + 3 * 3  # nothing else is drawn


def test_splits_are_deterministic_disjoint_and_verifiable():
    task = make_task("shapes", train_size=50, dev_size=10, eval_size=20, seed=3)
    again = make_task("shapes", train_size=50, dev_size=10, eval_size=20, seed=3)
    problems = {s: task.problems(s) for s in ("train", "dev", "eval")}
    assert [len(problems[s]) for s in ("train", "dev", "eval")] == [50, 10, 20]
    for split, listed in problems.items():
        for ours, theirs in zip(listed, again.problems(split), strict=True):
            assert isinstance(ours, ImageProblem) and ours.answer == theirs.answer
            assert torch.equal(ours.pixel_values, theirs.pixel_values)
    pictures = [tuple(p.pixel_values.flatten().tolist()) for s in problems for p in problems[s]]
    assert len(set(pictures)) == 80  # no picture in two places
    first = problems["eval"][0]
    assert (
        first.prompt == "<image>How many shapes? A:"
        and first.target == f" \\boxed{{{first.answer}}}"
    )
    assert task.verify(first, first.target).correct
    wrong = str(int(first.answer) % 4 + 1)
    assert not task.verify(first, f" \\boxed{{{wrong}}}").correct
    assert task.default_max_new_tokens == len(" \\boxed{4}") + 1 + 4
