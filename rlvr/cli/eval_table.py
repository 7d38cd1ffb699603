"""What `rlvr eval` prints: a table (metric, value, 95 % interval, n) for a reader, or the
metrics as JSON (`--json`) for a program. Each metric's `_ci_low` / `_ci_high` companions
become its interval; n is the number of items a mean is over."""

from __future__ import annotations

import json
import math

from rlvr.cli.common import format_table

BOUNDS = ("_ci_low", "_ci_high")
COUNTS = ("eval/items", "eval/k", "eval/max_new_tokens")
"""Settings of the evaluation, said in the heading, not rows of the table."""


def number(value: float) -> str:
    """4 significant digits: 0.6899999999999998 → 0.69, 1.8811 → 1.881, 17.0 → 17."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def eval_table(metrics: dict[str, float]) -> str:
    """The metrics as a table with a heading line; the rows in the order they were made."""
    items = metrics.get("eval/items")
    n = "" if items is None else str(int(items))
    rows = []
    for name, value in metrics.items():
        if name.endswith(BOUNDS) or name in COUNTS:
            continue
        low, high = metrics.get(name + BOUNDS[0]), metrics.get(name + BOUNDS[1])
        interval = "" if low is None or high is None else f"[{number(low)}, {number(high)}]"
        timing = name.startswith("time/")
        rows.append(
            {
                "metric": name,
                "value": f"{value:.1f} s" if timing else number(value),
                "95% interval": interval,
                "n": "" if timing else n,
            }
        )
    rows.sort(key=lambda row: row["metric"].startswith("time/"))  # stable: time last
    said = {
        "eval/items": "{} items",
        "eval/k": "k = {}",
        "eval/max_new_tokens": "max_new_tokens {}",
    }
    heading = "rlvr eval: " + ", ".join(
        said[c].format(int(metrics[c])) for c in COUNTS if c in metrics
    )
    table = format_table(rows, ("metric", "value", "95% interval", "n")) if rows else ""
    return f"{heading}\n{table}".rstrip()


def render(metrics: dict[str, float], as_json: bool) -> str:
    """`--json`: the metrics as JSON, as before; else the table."""
    return json.dumps(metrics, indent=1) if as_json else eval_table(metrics)
