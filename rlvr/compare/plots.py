"""PNG plots of a comparison: accuracy against steps, generated tokens and wall time,
training response length, clip fraction, and the fitted compute curves.

Each condition has one colour: thin lines are single seeds, the thick line is the mean
over seeds at each eval point (or step).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rlvr.compare.curves import SigmoidFit
from rlvr.compare.results import CellResult

SMOOTH = 5  # steps in the moving average of per-step training curves


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _by_label(results: list[CellResult]) -> dict[str, list[CellResult]]:
    groups: dict[str, list[CellResult]] = {}
    for result in results:
        groups.setdefault(result.cell.label, []).append(result)
    return groups


def _mean_curve(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean x and y over seeds, point by point, up to the shortest curve."""
    n = min(len(x) for x, _ in curves)
    xs = np.mean([x[:n] for x, _ in curves], axis=0)
    ys = np.mean([y[:n] for _, y in curves], axis=0)
    return xs, ys


def _draw(ax, groups, series: Callable[[CellResult], tuple[np.ndarray, np.ndarray]]) -> None:
    for index, (label, cells) in enumerate(groups.items()):
        color = f"C{index % 10}"
        curves = [series(c) for c in cells]
        curves = [(x, y) for x, y in curves if len(x)]
        for x, y in curves:
            ax.plot(x, y, color=color, alpha=0.25, lw=0.8)
        if curves:
            mx, my = _mean_curve(curves)
            ax.plot(mx, my, color=color, lw=2.0, label=f"{label} (n={len(curves)})")


def _eval_series(x_key: str, y_key: str = "eval/accuracy"):
    def series(result: CellResult) -> tuple[np.ndarray, np.ndarray]:
        rows = [r for r in result.rows if r.get(y_key) is not None]
        return np.array([r[x_key] for r in rows], float), np.array([r[y_key] for r in rows], float)

    return series


def _step_series(key: str):
    def series(result: CellResult) -> tuple[np.ndarray, np.ndarray]:
        points = [
            (r["step"], r[key]) for r in result.records if r["step"] > 0 and r.get(key) is not None
        ]
        if not points:
            return np.array([]), np.array([])
        steps, values = (np.array(v, float) for v in zip(*points, strict=True))
        kernel = np.ones(min(SMOOTH, len(values))) / min(SMOOTH, len(values))
        return steps[len(kernel) - 1 :], np.convolve(values, kernel, mode="valid")

    return series


def _figure(path: Path, title: str, xlabel: str, ylabel: str, draw) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    draw(ax)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_comparison(
    results: list[CellResult], fits: dict[str, SigmoidFit], out_dir: str | Path
) -> list[Path]:
    """Write every plot under `out_dir` (created); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups = _by_label(results)
    acc = "held-out accuracy"
    specs = [
        ("accuracy_vs_step.png", "Held-out accuracy vs optimizer step", "step", acc,
         _eval_series("step")),
        ("accuracy_vs_tokens.png", "Held-out accuracy vs generated tokens",
         "generated tokens (cumulative, incl. discarded)", acc, _eval_series("generated_tokens")),
        ("accuracy_vs_wall.png", "Held-out accuracy vs wall time", "seconds since start", acc,
         _eval_series("wall_s")),
        ("response_length.png", f"Training response length ({SMOOTH}-step mean)", "step",
         "tokens per response", _step_series("rollout/response_length")),
        ("clip_fraction.png", f"Clip fraction, token level ({SMOOTH}-step mean)", "step",
         "fraction of tokens clipped", _step_series("clip/frac")),
    ]  # fmt: skip
    paths = [
        _figure(out / name, title, xl, yl, lambda ax, s=series: _draw(ax, groups, s))
        for name, title, xl, yl, series in specs
    ]
    paths.append(_fit_figure(out / "compute_fit.png", groups, fits))
    return paths


def _fit_figure(path: Path, groups, fits: dict[str, SigmoidFit]) -> Path:
    def draw(ax) -> None:
        for index, (label, cells) in enumerate(groups.items()):
            color = f"C{index % 10}"
            for cell in cells:
                x, y = _eval_series("generated_tokens")(cell)
                ax.scatter(x[x > 0], y[x > 0], color=color, s=8, alpha=0.4)
            fit = fits.get(label)
            if fit is not None:
                grid = np.geomspace(*fit.compute_range, 100)
                note = "" if fit.reliable else ", unreliable"
                name = f"{label}: A={fit.a:.2f}, C_mid={fit.c_mid:.2g}, R²={fit.r2:.2f}{note}"
                ax.plot(
                    grid,
                    fit.predict(grid),
                    color=color,
                    lw=2,
                    ls="-" if fit.reliable else "--",
                    label=name,
                )
        ax.set_xscale("log")

    return _figure(path, "ScaleRL sigmoid fits R(C), C = generated tokens",
                   "generated tokens (log scale)", "held-out accuracy", draw)  # fmt: skip
