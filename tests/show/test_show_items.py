"""`rlvr show ITEMS.jsonl` and `rlvr show A.jsonl B.jsonl`: one `rlvr eval --items` file's
items, and two files' items won and lost side by side."""

from __future__ import annotations

import contextlib
import io

from show_testlib import item, write_items

from rlvr.cli import main

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
A_FILE = ROOT / "examples/items/embedded_t0.5.jsonl"
B_FILE = ROOT / "examples/items/embedded_t1.0.jsonl"


def rlvr(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def pair(tmp_path):
    """Item u1: A 2/2, B 0/2 (won); u2: A 0/2, B 1/2 (lost); u3: both 1/2 (tie)."""
    ok, bad = " \\boxed{2}", " \\boxed{3}"
    a = [item("u1", "2", [ok, ok]), item("u2", "2", [bad, bad]), item("u3", "2", [ok, bad])]
    b = [item("u1", "2", [bad, bad]), item("u2", "2", [ok, bad]), item("u3", "2", [bad, ok])]
    return write_items(tmp_path / "a.jsonl", a), write_items(tmp_path / "b.jsonl", b)


def test_items_file_means_counts_and_grouped_samples(tmp_path) -> None:
    a, _ = pair(tmp_path)
    code, out, _ = rlvr("show", str(a))
    assert code == 0
    # avg: (1 + 0 + 0.5) / 3 = 0.5; maj: (1 + 0 + 0) / 3; pass@2: (1 + 0 + 1) / 3
    assert "  means over items: avg 0.500  maj 0.333  pass@2 0.667  format_rate 1.000" in out
    assert "every sample correct on 1 items, some on 1, none on 1" in out
    assert "item u1   answer 2   prompt Q: 1+1=? A:\n  2/2 correct\n  ✓ ×2   \\boxed{2}\n" in out
    assert "  ✗ ×2   \\boxed{3}   (expected 2)\n" in out


def test_rows_limits_the_items_shown(tmp_path) -> None:
    a, _ = pair(tmp_path)
    out = rlvr("show", str(a), "--rows", "1")[1]
    assert "showing 1 of 3 items" in out and out.count("\nitem ") == 1


def test_two_files_show_items_won_and_lost_side_by_side(tmp_path) -> None:
    a, b = pair(tmp_path)
    code, out, _ = rlvr("show", str(a), str(b), "--no-color")
    assert code == 0
    assert "won by A (avg higher in A): 1 items, showing 1" in out
    assert "lost by A (avg higher in B): 1 items, showing 1" in out
    won = out.split("won by A")[1].split("lost by A")[0]
    assert "item u1 " in won and "item u2 " not in won and "item u3" not in out
    left, right = won.splitlines()[3].split(" │ ")
    assert left.strip() == "A: 2/2 correct, avg 1" and right.strip() == "B: 0/2 correct, avg 0"


def test_two_files_summary_is_compare_items_own(tmp_path) -> None:
    # The view starts with exactly what `rlvr compare --items A B` prints, and lists as
    # many items won and lost as its sign test counts.
    code, out, _ = rlvr("show", str(A_FILE), str(B_FILE), "--rows", "1")
    assert code == 0
    summary = rlvr("compare", "--items", str(A_FILE), str(B_FILE))[1]
    assert out.startswith(summary.rstrip("\n") + "\n")
    assert "A higher on 21 items, B higher on 5" in summary
    assert "won by A (avg higher in A): 21 items" in out
    assert "lost by A (avg higher in B): 5 items" in out


def test_score_chooses_the_compared_column(tmp_path) -> None:
    a, b = pair(tmp_path)
    # pass@2: u1 1 vs 0 (won), u2 0 vs 1 (lost), u3 1 vs 1 (tie).
    out = rlvr("show", str(a), str(b), "--score", "pass@2")[1]
    assert "won by A (pass@2 higher in A): 1 items" in out


def test_items_files_that_cannot_be_compared_are_named(tmp_path) -> None:
    a, _ = pair(tmp_path)
    other = write_items(tmp_path / "c.jsonl", [item("u1", "2", [" \\boxed{2}"] * 2)])
    code, _, err = rlvr("show", str(a), str(other))
    assert code == 2 and "the files hold different items" in err
    code, _, err = rlvr("show", str(a), "--step", "2")
    assert code == 2 and "--step applies to a run directory, not to an items file" in err
