"""The curves of one run as a PNG: held-out accuracy, training reward, length and clipping."""

from __future__ import annotations

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

Series = dict[str, tuple[list[float], list[float]]]


def panel_series(records: list[dict[str, Any]]) -> dict[str, Series]:
    """Panel title → metric → (steps, values): exactly what `plot_run` draws; records
    without the metric (or with None) are skipped, metrics with no point are left out."""
    panels: dict[str, Series] = {}
    for label, keys in PANELS:
        panels[label] = {}
        for key in keys:
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                panels[label][key] = (list(xs), list(ys))
    return panels


def plot_run(records: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Write a 2×2 figure of the run's curves to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (label, series) in zip(axes.flat, panel_series(records).items(), strict=True):
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
