"""The curves of one run as a PNG: held-out accuracy, training reward, length and clipping;
for a run that logged episodes (any `env/` metric) the episodes' panels beside reward and
accuracy. One definition of what is drawn: `rlvr show`'s SVG curves read it too."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PANELS = (
    ("eval accuracy (held-out)", ("eval/accuracy", "eval/greedy_accuracy")),
    # reward/mean is what the advantages were computed from (correctness, or the weighted
    # sum of reward_funcs); accuracy beside it shows when the two part ways.
    ("training reward", ("reward/mean", "reward/accuracy", "reward/format_rate")),
    ("response length (tokens)", ("rollout/response_length",)),
    ("clip fraction", ("clip/frac", "clip/low_frac", "clip/high_frac")),
)
ENV_PANELS = (
    ("episode turns and tool calls", ("env/turns", "env/tool_calls")),
    (
        "episode health (fractions)",
        ("env/failed_frac", "env/tool_error_rate", "env/valid_call_rate", "env/ended_budget"),
    ),
    ("observation tokens per episode", ("env/observation_tokens",)),
)
"""Drawn when the run logged episodes (any `env/` metric), after accuracy and reward: how
many turns and calls, how often the environment, tools or budget failed them, what the
environment said."""

Series = dict[str, tuple[list[float], list[float]]]


def _series(records: list[dict[str, Any]], keys: tuple[str, ...]) -> Series:
    """metric → (steps, values); records without the metric (or with None) are skipped,
    metrics with no point are left out."""
    found: Series = {}
    for key in keys:
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            found[key] = (list(xs), list(ys))
    return found


def panel_series(records: list[dict[str, Any]]) -> dict[str, Series]:
    """Panel title → metric → (steps, values): exactly what `plot_run` draws, in order;
    `ENV_PANELS` follow accuracy and reward when the run logged any `env/` metric."""
    panels = list(PANELS)
    if any(key.startswith("env/") for r in records for key in r):
        panels[2:2] = ENV_PANELS
    return {title: _series(records, keys) for title, keys in panels}


def plot_run(records: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Write the run's panels to `path`, two rows (2×2, or 2×4 with the episodes' panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panel_series(records)
    columns = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(2, columns, figsize=(5.5 * columns, 7), constrained_layout=True)
    for ax in axes.flat[len(panels) :]:
        ax.remove()  # 7 panels on a 2×4 grid: the eighth slot stays empty
    for ax, (label, series) in zip(axes.flat, panels.items(), strict=False):
        for key, (xs, ys) in series.items():
            ax.plot(xs, ys, marker="o" if key.startswith("eval/") else None, ms=3, label=key)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
