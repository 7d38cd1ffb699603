"""Write the tool example's data: 2-digit products, split by unordered pair of factors.

Every question is "What is a * b?" for a, b in 11–99, neither a multiple of 10 (a product
such as 40 * 70 can be done in the head; these cannot, by a 135 M model). Distinct
unordered pairs {a, b} are drawn with a fixed seed, each written once in a random order,
and dealt to eval, dev and train, so no held-out product is trained on or used to choose
settings (dev is for that). The pair {12, 34} of the system prompt's example call is
left out. Run from anywhere; it rewrites the three files beside it, and
`tests/models/test_real_tools_example.py` checks that it reproduces the committed ones:

    python examples/real/make_tools_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 403  # issue 40, item 3
SPLIT_SIZES = {"eval": 48, "dev": 24, "train": 256}
EXAMPLE = frozenset((12, 34))  # the system prompt's example call: <calc>12*34</calc>
FACTORS = [n for n in range(11, 100) if n % 10]  # 81 factors, 3,321 unordered pairs


def rows_by_split(seed: int = SEED) -> dict[str, list[dict]]:
    """The rows of each split: {"prompt", "answer", "a", "b"}, in the order drawn."""
    rng = random.Random(seed)
    pairs = [(a, b) for i, a in enumerate(FACTORS) for b in FACTORS[i:]]
    pairs = [pair for pair in pairs if frozenset(pair) != EXAMPLE]
    chosen = rng.sample(pairs, sum(SPLIT_SIZES.values()))
    splits: dict[str, list[dict]] = {}
    start = 0
    for split, count in SPLIT_SIZES.items():
        rows = []
        for x, y in chosen[start : start + count]:
            a, b = (x, y) if rng.random() < 0.5 else (y, x)
            rows.append({"prompt": f"What is {a} * {b}?", "answer": str(a * b), "a": a, "b": b})
        splits[split] = rows
        start += count
    return splits


def main() -> None:
    for split, rows in rows_by_split().items():
        path = HERE / f"tools_{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{split}: {len(rows)} rows → {path}")


if __name__ == "__main__":
    main()
