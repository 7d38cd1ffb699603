"""`rlvr compare --items A B`: two `rlvr eval --items` files compared item by item, by hand
and on a real round trip; every file that cannot be compared is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.cli import main

A_AVG = [1.0, 1.0, 0.5, 0.0, 0.25, 0.75]
B_AVG = [0.0, 1.0, 0.0, 0.0, 0.5, 0.25]


def record(i: int, avg: float, **extra) -> dict:
    """One line as `rlvr eval --k 4 --items` writes it (samples left out)."""
    c = round(avg * 4)
    return {
        "uid": f"gsm8k/eval/{i}",
        "task": "gsm8k",
        "answer": str(10 + i),
        "n": 4,
        "c": c,
        "avg": avg,
        "maj": float(c > 2),
        "pass@1": avg,
        "pass@2": 1 - (4 - c) * (3 - c) / 12 if c < 4 else 1.0,  # 1 − C(4−c, 2)/C(4, 2)
        "pass@4": float(c > 0),
        **extra,
    }


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def pair(tmp_path):
    a = write(tmp_path / "a.jsonl", [record(i, v) for i, v in enumerate(A_AVG)][::-1])
    b = write(tmp_path / "b.jsonl", [record(i, v) for i, v in enumerate(B_AVG)])
    return a, b


def compare(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_compare_items_by_hand(pair, capsys):
    code, out, err = compare(capsys, "--items", *pair)
    assert code == 0 and not err
    # matched by uid (A was written in reverse order). Differences A − B per item:
    # 1, 0, 0.5, 0, −0.25, 0.5 → Δ = 1.75 / 6 = +0.292; mean A = 3.5/6 = 0.583, B = 1.75/6
    # = 0.292. A higher on items 0, 2, 5 (3), B on item 4 (1), 2 ties. Sign test on the
    # 4 discordant items, 3 vs 1: p = 2·P(X ≥ 3 | n=4, ½) = 2·(4 + 1)/16 = 0.625.
    lines = out.splitlines()
    assert lines[0].startswith("items      6, matched by uid (task gsm8k, k = 4); score: avg")
    assert lines[1].startswith("A          0.583") and lines[2].startswith("B          0.292")
    assert lines[3].startswith("Δ = A − B  +0.292, 95 % paired bootstrap CI [")
    assert lines[4] == (
        "sign test  A higher on 3 items, B higher on 1, 2 ties; exact two-sided p = 0.625"
    )
    low, high = (float(x) for x in lines[3].split("[")[1].split("]")[0].split(", "))
    assert low < 0.292 < high


def test_score_column_is_chosen_and_a_constant_difference_has_an_exact_ci(tmp_path, capsys):
    # maj with c = 3 in A and c = 2 in B on every item: maj 1 vs 0 → Δ = 1 on all 5 items;
    # every bootstrap resample has mean 1, so the CI is [1, 1]; sign test 5 vs 0:
    # p = 2·(1/2)⁵ = 0.0625. avg differs too (0.75 vs 0.5) but is not the score.
    a = write(tmp_path / "a.jsonl", [record(i, 0.75) for i in range(5)])
    b = write(tmp_path / "b.jsonl", [record(i, 0.5) for i in range(5)])
    code, out, _ = compare(capsys, "--items", a, b, "--score", "maj")
    assert code == 0
    assert "score: maj per item" in out
    assert "Δ = A − B  +1.000, 95 % paired bootstrap CI [+1.000, +1.000]" in out
    assert "A higher on 5 items, B higher on 0, 0 ties; exact two-sided p = 0.0625" in out
    # pass@2 of c = 3 is 1 − C(1,2)/C(4,2) = 1 and of c = 2 is 1 − 1/6 = 0.833: Δ = +0.167
    code, out, _ = compare(capsys, "--items", a, b, "--score", "pass@2")
    assert code == 0 and "Δ = A − B  +0.167" in out


GOOD = [record(i, v) for i, v in enumerate(A_AVG)]


@pytest.mark.parametrize(
    ("a_rows", "b_rows", "extra", "named"),
    [
        (GOOD, GOOD[:5], [], "different items: 1 only in {a} ['gsm8k/eval/5'], 0 only in {b}"),
        (GOOD, [{"eval/items": 6.0, "eval/avg@4": 0.5}], [], "{b}:1: not an `rlvr eval --items`"),
        (GOOD, [json.dumps([1, 2])], [], "{b}:1: not an `rlvr eval --items` line"),
        (GOOD, ["{not json"], [], "{b}:1: not valid JSON"),
        (GOOD, [], [], "{b}: holds no items"),
        (GOOD, GOOD + GOOD[:1], [], "{b}:7: item 'gsm8k/eval/0' again (first on line 1)"),
        (GOOD, GOOD, ["--score", "pass@8"], "{a}:1: item 'gsm8k/eval/0' has no 'pass@8' column"),
        (GOOD, GOOD, ["--score", "best"], "--score must be avg, maj or pass@j"),
        (GOOD, [{**r, "n": 8} for r in GOOD], [], "different k: {a} has k = 4, {b} has k = 8"),
        (GOOD, [{**r, "task": "math"} for r in GOOD], [], "different tasks: {a} on gsm8k, {b}"),
        (GOOD, [{**r, "answer": "7"} for r in GOOD], [], "answer '10' in {a}:1 but '7' in {b}:1"),
        (GOOD, [{**r, "avg": 2} for r in GOOD], [], "{b}:1: avg of item 'gsm8k/eval/0' must be"),
        (GOOD, GOOD, ["--out", "x"], "--out is an option of a matrix comparison"),
        (GOOD, GOOD, ["--recipes", "grpo", "--jobs", "1"], "--recipes, --jobs are options"),
    ],
)
def test_files_that_cannot_be_compared_are_refused_by_name(
    a_rows, b_rows, extra, named, tmp_path, capsys
):
    a_rows = [r if isinstance(r, str) else json.dumps(r) for r in a_rows]
    b_rows = [r if isinstance(r, str) else json.dumps(r) for r in b_rows]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(line + "\n" for line in a_rows))
    b.write_text("".join(line + "\n" for line in b_rows))
    code, out, err = compare(capsys, "--items", str(a), str(b), *extra)
    assert code == 2 and not out  # validated before anything is printed
    assert named.format(a=a, b=b) in err and err.count("\n") == 1


def test_missing_file_and_score_alone_are_refused(pair, tmp_path, capsys):
    code, _, err = compare(capsys, "--items", pair[0], str(tmp_path / "none.jsonl"))
    assert code == 2 and f"{tmp_path / 'none.jsonl'}: cannot read the items file" in err
    code, _, err = compare(capsys, "--score", "maj", "--out", str(tmp_path / "c"))
    assert code == 2 and "--score applies to --items A B" in err
    code, _, err = compare(capsys, "--recipes", "grpo")
    assert code == 2 and "--out is required" in err


def test_round_trip_from_rlvr_eval(tmp_path, capsys):
    """Two `rlvr eval --items` runs of the same model with the same seed are the same
    samples, so every item ties: Δ = 0 exactly, CI [0, 0], sign test p = 1."""
    files = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    for path in files:
        argv = ["eval", "--k", "2", "--size", "6", "--max-new-tokens", "6", "--items", str(path)]
        assert main(argv) == 0
    capsys.readouterr()
    code, out, err = compare(capsys, "--items", *map(str, files))
    assert code == 0 and not err
    assert "items      6, matched by uid (task arithmetic, k = 2)" in out
    assert "Δ = A − B  +0.000, 95 % paired bootstrap CI [+0.000, +0.000]" in out
    assert "A higher on 0 items, B higher on 0, 6 ties; exact two-sided p = 1" in out
    assert json.loads(files[0].read_text().splitlines()[0])["task"] == "arithmetic"
