"""`rlvr show ITEMS.jsonl` and `rlvr show A.jsonl B.jsonl`: the items of `rlvr eval --items`
files, one file's items with their samples, or two files' items won and lost side by side.

Two files are checked and compared exactly as `rlvr compare --items A B` does
(rlvr/eval/paired.py): its summary heads the view, then the items where A's score beats
B's ("won") and where it falls short ("lost"), the largest differences first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from rlvr.show.load import ShowError
from rlvr.show.text import clean, paint, wrap

GUTTER = " │ "


@dataclass(frozen=True)
class Diff:
    """Two items files compared: the paired summary and the uids won and lost by A."""

    summary: str  # rlvr compare --items' own lines
    score: str
    a: Any  # rlvr.eval.paired.Items
    b: Any
    won: list[str]  # A's score > B's, largest difference first
    lost: list[str]


def load_items(path: str):
    from rlvr.eval.paired import ItemsError, read_items

    try:
        return read_items(path)
    except ItemsError as err:
        raise ShowError(str(err)) from None


def load_diff(a_path: str, b_path: str, score: str = "avg") -> Diff:
    """Validate and compare two items files (as `rlvr compare --items`) and sort the
    items A won and lost on `score`."""
    from rlvr.eval.paired import ItemsError, format_paired, paired_items, read_items

    try:
        result = paired_items(a_path, b_path, score)
        a, b = read_items(a_path), read_items(b_path)
    except ItemsError as err:
        raise ShowError(str(err)) from None
    gap = {uid: a.records[uid][score] - b.records[uid][score] for uid in a.records}
    won = sorted((u for u in gap if gap[u] > 0), key=lambda u: (-gap[u], u))
    lost = sorted((u for u in gap if gap[u] < 0), key=lambda u: (gap[u], u))
    return Diff(format_paired(result, a_path, b_path), score, a, b, won, lost)


def sample_groups(record: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """The item's samples with identical texts counted once: (sample, count), most
    frequent first."""
    samples = record.get("samples") or []
    counts = Counter(s.get("text", "") for s in samples)
    first = {}
    for sample in samples:
        first.setdefault(sample.get("text", ""), sample)
    return [(first[text], n) for text, n in counts.most_common()]


def sample_line(sample: dict[str, Any], count: int, color: bool) -> str:
    mark = paint("✓", "good", color) if sample.get("correct") else paint("✗", "bad", color)
    reason = "" if sample.get("correct") else f"   ({clean(str(sample.get('reason', '')))})"
    return f"{mark} ×{count}  {clean(str(sample.get('text', '')))}{reason}"


def item_head(record: dict[str, Any]) -> str:
    return (
        f"item {clean(record['uid'])}   answer {clean(str(record.get('answer', '?')))}   "
        f"prompt {clean(str(record.get('prompt', '')))}"
    )


def items_text(items, rows: int, color: bool) -> str:
    """One items file: the means over its items, then the first `rows` items."""
    records = list(items.records.values())
    k = items.ks()
    task = f", task {', '.join(items.tasks())}" if items.tasks() else ""
    means = {
        key: sum(r[key] for r in records) / len(records)
        for key in ("avg", "maj", f"pass@{max(k)}", "format_rate", "mean_tokens")
        if all(isinstance(r.get(key), (int, float)) for r in records)
    }
    solved = Counter(_solved(r) for r in records)
    lines = [
        f"items {items.path}: {len(records)} items{task}, k = {', '.join(map(str, k))}",
        "  means over items: " + "  ".join(f"{key} {v:.3f}" for key, v in means.items()),
        f"  every sample correct on {solved['all']} items, some on {solved['some']}, "
        f"none on {solved['none']}",
        f"showing {min(rows, len(records))} of {len(records)} items in file order (--rows K)",
    ]
    for record in records[:rows]:
        lines += ["", item_head(record), f"  {_correct(record)}"]
        lines += [f"  {sample_line(s, n, color)}" for s, n in sample_groups(record)]
    return "\n".join(lines)


def _solved(record: dict[str, Any]) -> str:
    c, n = record.get("c", round(record["avg"] * record["n"])), record["n"]
    return "all" if c == n else "none" if c == 0 else "some"


def _correct(record: dict[str, Any]) -> str:
    c = record.get("c", round(record["avg"] * record["n"]))
    return f"{c}/{record['n']} correct"


def diff_text(diff: Diff, rows: int, color: bool, width: int) -> str:
    """The paired summary, then up to `rows` items won and `rows` lost, A beside B."""
    lines = [diff.summary]
    for title, uids in (("won by A", diff.won), ("lost by A", diff.lost)):
        lines += [
            "",
            f"{title} ({diff.score} higher in {'A' if title == 'won by A' else 'B'}): "
            f"{len(uids)} items, showing {min(rows, len(uids))} (--rows K)",
        ]
        for uid in uids[:rows]:
            lines += ["", item_head(diff.a.records[uid]), *side_by_side(diff, uid, color, width)]
    return "\n".join(lines)


def side_by_side(diff: Diff, uid: str, color: bool, width: int) -> list[str]:
    """A's and B's samples of item `uid` in two columns of `width` characters in all."""
    column = max(20, (width - len(GUTTER) - 2) // 2)
    sides = []
    for name, items in (("A", diff.a), ("B", diff.b)):
        record = items.records[uid]
        cells = [(f"{name}: {_correct(record)}, {diff.score} {record[diff.score]:.3g}", "")]
        for sample, count in sample_groups(record):
            style = "good" if sample.get("correct") else "bad"
            cells += [(line, style) for line in wrap(sample_line(sample, count, False), column)]
        sides.append(cells)
    height = max(map(len, sides))
    lines = []
    for i in range(height):
        cells = [side[i] if i < len(side) else ("", "") for side in sides]
        left, right = (_cell(text, style, column, color) for text, style in cells)
        lines.append(f"  {left}{GUTTER}{right}".rstrip())
    return lines


def _cell(text: str, style: str, column: int, color: bool) -> str:
    padded = text.ljust(column)
    return paint(padded, style, color) if style else padded
