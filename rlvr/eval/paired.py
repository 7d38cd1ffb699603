"""Item-by-item comparison of two `rlvr eval --items` files (two models, same items).

`rlvr compare --items A B` reads both files, checks that they can be compared (the same
items, matched by `uid`, with the same answers; the same k; the same task) and tests the
per-item score (`avg`, `maj` or `pass@j`, columns of every record) with a paired
bootstrap CI of mean(A) − mean(B) over items and an exact sign test on the items where A
and B differ (rlvr/eval/significance.py). Every check runs before anything is printed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.eval.significance import paired_bootstrap, sign_test

REQUIRED = ("uid", "n", "avg")  # written on every line by `rlvr eval --items`
SCORE = re.compile(r"avg|maj|pass@[1-9][0-9]*")
RESAMPLES = 10_000


class ItemsError(ValueError):
    """Two items files that cannot be compared; the message names the file and the fault."""


@dataclass(frozen=True)
class Items:
    """The records of one items file by uid, and the line each came from."""

    path: str
    records: dict[str, dict[str, Any]]
    lines: dict[str, int]

    def ks(self) -> list[int]:
        return sorted({r["n"] for r in self.records.values()})

    def tasks(self) -> list[str]:
        return sorted({r["task"] for r in self.records.values() if "task" in r})


@dataclass(frozen=True)
class PairedItems:
    items: int
    k: int
    task: str | None
    score: str
    mean_a: float
    mean_b: float
    diff: float  # mean(A) − mean(B)
    diff_ci_low: float
    diff_ci_high: float
    wins: int  # items where A's score exceeds B's
    losses: int
    ties: int
    p_value: float  # exact two-sided sign test


def _record(path: str, number: int, line: str) -> dict[str, Any]:
    where = f"{path}:{number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ItemsError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise ItemsError(f"{where}: not an `rlvr eval --items` line (a JSON object per item)")
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise ItemsError(
            f"{where}: not an `rlvr eval --items` line: no {', '.join(map(repr, missing))} "
            f"(every line has {', '.join(REQUIRED)}); was it written by `rlvr eval --k K --items`?"
        )
    if not isinstance(record["uid"], str):
        raise ItemsError(f"{where}: uid must be a string, got {record['uid']!r}")
    if isinstance(record["n"], bool) or not isinstance(record["n"], int) or record["n"] < 1:
        raise ItemsError(
            f"{where}: n (samples of the item) must be an integer ≥ 1, got {record['n']!r}"
        )
    return record


def read_items(path: str | Path) -> Items:
    """The validated records of an items JSONL file (one JSON object per item)."""
    name = str(path)
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ItemsError(f"{name}: cannot read the items file ({err.strerror})") from None
    records: dict[str, dict[str, Any]] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _record(name, number, line)
        uid = record["uid"]
        if uid in records:
            raise ItemsError(f"{name}:{number}: item {uid!r} again (first on line {lines[uid]})")
        records[uid], lines[uid] = record, number
    if not records:
        raise ItemsError(f"{name}: holds no items (`rlvr eval --items` writes one line per item)")
    return Items(name, records, lines)


def _check_runs(a: Items, b: Items) -> None:
    """Same k within and across files; the same task where both record it."""
    for items in (a, b):
        if len(items.ks()) > 1:
            raise ItemsError(f"{items.path}: items with different sample counts n = {items.ks()}")
    if a.ks() != b.ks():
        raise ItemsError(
            f"the files were evaluated with different k: {a.path} has k = {a.ks()[0]}, "
            f"{b.path} has k = {b.ks()[0]}; compare files of the same `rlvr eval --k K`"
        )
    if a.tasks() and b.tasks() and a.tasks() != b.tasks():
        raise ItemsError(
            f"the files were evaluated on different tasks: {a.path} on {', '.join(a.tasks())}, "
            f"{b.path} on {', '.join(b.tasks())}"
        )


def _check_items(a: Items, b: Items) -> list[str]:
    """The shared uids, sorted; every item in both files, with the same answer."""
    only_a, only_b = (
        sorted(set(a.records) - set(b.records)),
        sorted(set(b.records) - set(a.records)),
    )
    if only_a or only_b:
        raise ItemsError(
            f"the files hold different items: {len(only_a)} only in {a.path} {only_a[:3]}, "
            f"{len(only_b)} only in {b.path} {only_b[:3]}; evaluate both with the same "
            "--task, --data, --split and --size"
        )
    uids = sorted(a.records)
    for uid in uids:
        x, y = a.records[uid].get("answer"), b.records[uid].get("answer")
        if x != y:
            raise ItemsError(
                f"item {uid!r} has answer {x!r} in {a.path}:{a.lines[uid]} but {y!r} in "
                f"{b.path}:{b.lines[uid]}: the files were evaluated on different data"
            )
    return uids


def _scores(items: Items, uids: list[str], score: str) -> np.ndarray:
    values = []
    for uid in uids:
        record = items.records[uid]
        value = record.get(score)
        if score not in record:
            have = [k for k in record if SCORE.fullmatch(k)]
            raise ItemsError(
                f"{items.path}:{items.lines[uid]}: item {uid!r} has no {score!r} column; "
                f"--score can be {', '.join(have)}"
            )
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not 0 <= value <= 1:
            raise ItemsError(
                f"{items.path}:{items.lines[uid]}: {score} of item {uid!r} must be a number "
                f"in [0, 1], got {value!r}"
            )
        values.append(float(value))
    return np.array(values)  # (items,)


def paired_items(a_path: str | Path, b_path: str | Path, score: str = "avg") -> PairedItems:
    """Validate two items files and compare `score` item by item (mean(A) − mean(B) with a
    95 % paired-bootstrap CI over items, and the exact sign test)."""
    if not SCORE.fullmatch(score):
        raise ItemsError(f"--score must be avg, maj or pass@j (e.g. pass@4), got {score!r}")
    a, b = read_items(a_path), read_items(b_path)
    _check_runs(a, b)
    uids = _check_items(a, b)
    x, y = _scores(a, uids, score), _scores(b, uids, score)
    interval = paired_bootstrap(x[None], y[None], resamples=RESAMPLES)  # one "seed" row
    test = sign_test(x[None], y[None])
    return PairedItems(
        items=len(uids),
        k=a.ks()[0],
        task=a.tasks()[0] if a.tasks() else None,
        score=score,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        diff=interval.mean,
        diff_ci_low=interval.low,
        diff_ci_high=interval.high,
        wins=test.wins,
        losses=test.losses,
        ties=test.ties,
        p_value=test.p_value,
    )


def format_paired(result: PairedItems, a_path: str, b_path: str) -> str:
    """The few lines `rlvr compare --items` prints."""
    task = f"task {result.task}, " if result.task else ""
    return "\n".join(
        [
            f"items      {result.items}, matched by uid ({task}k = {result.k}); "
            f"score: {result.score} per item",
            f"A          {result.mean_a:.3f}  {a_path}",
            f"B          {result.mean_b:.3f}  {b_path}",
            f"Δ = A − B  {result.diff:+.3f}, 95 % paired bootstrap CI "
            f"[{result.diff_ci_low:+.3f}, {result.diff_ci_high:+.3f}] "
            f"({RESAMPLES} resamples of the items)",
            f"sign test  A higher on {result.wins} items, B higher on {result.losses}, "
            f"{result.ties} ties; exact two-sided p = {result.p_value:.3g}",
        ]
    )
