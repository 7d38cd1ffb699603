"""`rlvr show ITEMS.jsonl --html` and `rlvr show A.jsonl B.jsonl --html`: the items of
`rlvr eval --items` files as a page — one file's items with their samples, or the items A
won and lost against B with both models' samples side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.show.html_page import controls, esc, page
from rlvr.show.items import Diff, load_diff, load_items, sample_groups

ITEM_FILTERS = {
    "all": "all items",
    "solved": "every sample correct",
    "some": "some samples correct",
    "unsolved": "no sample correct",
}
DIFF_FILTERS = {"all": "items won and lost", "won": "won by A", "lost": "lost by A"}


def samples_html(record: dict[str, Any]) -> str:
    lines = []
    for sample, count in sample_groups(record):
        ok = bool(sample.get("correct"))
        mark = '<span class="ok">✓</span>' if ok else '<span class="bad">✗</span>'
        reason = "" if ok else f" <i>({esc(sample.get('reason', ''))})</i>"
        lines.append(
            f"<div>{mark} ×{count} <code>{esc(sample.get('text', ''))}</code>{reason}</div>"
        )
    return "".join(lines)


def item_head(record: dict[str, Any]) -> str:
    c = record.get("c", round(record["avg"] * record["n"]))
    return (
        f'<div class="head">item <b>{esc(record["uid"])}</b> · answer '
        f"<b>{esc(record.get('answer', '?'))}</b> · {c}/{record['n']} correct</div>"
        f'<pre class="prompt">{esc(record.get("prompt", ""))}</pre>'
    )


def _solved(record: dict[str, Any]) -> str:
    c = record.get("c", round(record["avg"] * record["n"]))
    return "solved" if c == record["n"] else "unsolved" if c == 0 else "some"


def items_page(path: str) -> tuple[str, int]:
    items = load_items(path)
    rows = []
    for record in items.records.values():
        verdict = "correct" if _solved(record) == "solved" else "wrong"
        rows.append(
            f'<article class="row {verdict}" data-tags="{_solved(record)}">'
            f"{item_head(record)}{samples_html(record)}</article>"
        )
    body = (
        f"<h1>rlvr eval items: {esc(Path(path).name)}</h1>"
        f"<p>{len(rows)} items, k = {esc(', '.join(map(str, items.ks())))}</p>"
        f'{controls(None, None, ITEM_FILTERS)}<section class="rows">{"".join(rows)}</section>'
    )
    return page(f"rlvr items {Path(path).name}", body), len(rows)


def diff_row(diff: Diff, uid: str, tag: str) -> str:
    sides = []
    for name, items in (("A", diff.a), ("B", diff.b)):
        record = items.records[uid]
        score = f"{diff.score} {record[diff.score]:.3g}"
        sides.append(f"<div><b>{name}</b> · {esc(score)}{samples_html(record)}</div>")
    verdict = "correct" if tag == "won" else "wrong"
    return (
        f'<article class="row {verdict}" data-tags="{tag}">{item_head(diff.a.records[uid])}'
        f'<div class="sides">{"".join(sides)}</div></article>'
    )


def diff_page(a_path: str, b_path: str, score: str = "avg") -> tuple[str, int]:
    diff = load_diff(a_path, b_path, score)
    rows = [diff_row(diff, u, "won") for u in diff.won] + [
        diff_row(diff, u, "lost") for u in diff.lost
    ]
    body = (
        f"<h1>rlvr items: {esc(Path(a_path).name)} (A) vs {esc(Path(b_path).name)} (B)</h1>"
        f"<pre>{esc(diff.summary)}</pre>"
        f'{controls(None, None, DIFF_FILTERS)}<section class="rows">{"".join(rows)}</section>'
    )
    return page(f"rlvr items {Path(a_path).name} vs {Path(b_path).name}", body), len(rows)


def _write(path: str | Path, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


def write_items_page(items_path: str, path: str | Path) -> str:
    text, count = items_page(items_path)
    _write(path, text)
    return f"{count} items"


def write_diff_page(a_path: str, b_path: str, path: str | Path, score: str = "avg") -> str:
    text, count = diff_page(a_path, b_path, score)
    _write(path, text)
    return f"{count} items won or lost"
