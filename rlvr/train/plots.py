"""The curves of one run as a PNG: held-out accuracy, training reward, length and clipping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PANELS = (
    ("eval accuracy (held-out)", ("eval/accuracy", "eval/greedy_accuracy")),
    ("training reward", ("reward/accuracy", "reward/format_rate")),
    ("response length (tokens)", ("rollout/response_length",)),
    ("clip fraction", ("clip/frac", "clip/low_frac", "clip/high_frac")),
)


def plot_run(records: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Write a 2×2 figure of the run's curves to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (label, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
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
