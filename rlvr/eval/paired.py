"""Item-by-item comparison of two `rlvr eval --items` files (two models, same items).

Items are matched by `uid` (both files must hold the same set); the per-item score is a
column of the records (`avg`, `maj`, `pass@k`). The tests are those of `rlvr compare`:
a paired bootstrap CI of the mean difference over items, and an exact sign test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.eval.significance import paired_bootstrap, sign_test


def read_items(path: str | Path) -> dict[str, dict[str, Any]]:
    """Records of an items JSONL file by uid."""
    records = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            records[record["uid"]] = record
    return records


def paired_items(a_path: str | Path, b_path: str | Path, score: str = "avg") -> dict[str, float]:
    """mean(A) − mean(B) of `score` over shared items with a 95 % paired-bootstrap CI, and
    the sign test's wins / losses / ties / p-value."""
    a, b = read_items(a_path), read_items(b_path)
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:5]
        raise ValueError(f"the two files hold different items, e.g. {only}")
    uids = sorted(a)
    missing = [u for u in uids if score not in a[u] or score not in b[u]]
    if missing:
        raise ValueError(f"score {score!r} is missing for item {missing[0]!r}")
    x = np.array([[a[u][score] for u in uids]], dtype=float)  # (1 seed, items)
    y = np.array([[b[u][score] for u in uids]], dtype=float)
    interval = paired_bootstrap(x, y)
    test = sign_test(x, y)
    return {
        "items": float(len(uids)),
        "diff": interval.mean,
        "diff_ci_low": interval.low,
        "diff_ci_high": interval.high,
        "wins": float(test.wins),
        "losses": float(test.losses),
        "ties": float(test.ties),
        "p_value": test.p_value,
    }
