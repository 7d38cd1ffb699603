"""Write the example's data: single-digit addition, split by unordered pair of operands.

Every question is "What is a + b?" for a, b in 0–9 (100 questions). The 55 unordered pairs
{a, b} are shuffled with a fixed seed and dealt to eval, dev and train, so that 3 + 4 and
4 + 3 always share a split and no eval fact is ever trained on or used to choose settings
(dev is for that). Run from anywhere; it rewrites the three files beside it, and
`tests/models/test_real_example.py` checks that it reproduces the committed ones:

    python examples/real/make_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 40  # issue 40
SPLIT_PAIRS = {"eval": 30, "dev": 7, "train": 18}  # 55 unordered pairs {a, b}, a, b in 0–9


def rows_by_split(seed: int = SEED) -> dict[str, list[dict]]:
    """The rows of each split: {"prompt", "answer", "a", "b"}, ordered by (a, b)."""
    pairs = [(a, b) for a in range(10) for b in range(a, 10)]  # 55 unordered pairs
    random.Random(seed).shuffle(pairs)
    splits: dict[str, list[dict]] = {}
    start = 0
    for split, count in SPLIT_PAIRS.items():
        chosen = pairs[start : start + count]
        start += count
        ordered = sorted({(a, b) for x, y in chosen for a, b in ((x, y), (y, x))})
        splits[split] = [
            {"prompt": f"What is {a} + {b}?", "answer": str(a + b), "a": a, "b": b}
            for a, b in ordered
        ]
    return splits


def main() -> None:
    for split, rows in rows_by_split().items():
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (HERE / f"{split}.jsonl").write_text(text)
        print(f"{split}: {len(rows)} rows → {HERE / f'{split}.jsonl'}")


if __name__ == "__main__":
    main()
