"""Tool use in an evaluation's episodes, per item with 95 % CIs (`rlvr eval` with tools).

Each sample's episode gives its valid tool calls, malformed calls (`invalid_calls`),
tool failures (`tool_errors`: raised or timed out), policy turns and whether the
environment itself failed (`env_failed`: an episode scored as it ended); an item's value is
the mean over its samples, and the metric the mean over items with the Student-t
interval over items (the items are the independent units, as for accuracy)."""

from __future__ import annotations

from typing import Any

from rlvr.eval.significance import t_interval

TOOL_COLUMNS = ("tool_calls", "invalid_calls", "tool_errors", "turns", "env_failed")


def episode_values(record: Any) -> dict[str, float]:
    """One sample's tool-use values from its `EpisodeRecord`."""
    return {
        "tool_calls": float(record.tool_calls),
        "invalid_calls": float(record.invalid_calls),
        "tool_errors": float(record.tool_errors + record.tool_timeouts),
        "turns": float(record.turns),
        "env_failed": float(record.env_failed is not None),
    }


def item_means(samples: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each column over one item's samples."""
    return {c: sum(s[c] for s in samples) / len(samples) for c in TOOL_COLUMNS}


def summarise_tools(items: list[dict[str, float]]) -> dict[str, float]:
    """`eval/<column>` (per episode) with `_ci_low` / `_ci_high` over items; {} without
    episodes."""
    if not items:
        return {}
    metrics = {}
    for column in TOOL_COLUMNS:
        interval = t_interval([item[column] for item in items])
        metrics[f"eval/{column}"] = interval.mean
        metrics[f"eval/{column}_ci_low"] = interval.low
        metrics[f"eval/{column}_ci_high"] = interval.high
    return metrics
