"""The run's curves as inline SVG: the panels of curves.png (rlvr/runlog/plots.py, one
definition of what is drawn), each a polyline per metric, computed here from metrics.jsonl;
for a multi-turn run the episodes' panels (`rlvr.runlog.plots.ENV_PANELS`) beside reward and accuracy.
`overlay_html` draws several runs (a comparison's cells) on shared panels."""

from __future__ import annotations

from typing import Any

from rlvr.show.html_page import esc

WIDTH, HEIGHT = 270, 210
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 24, 58  # plot margins; the legend sits below the axis
COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
OVERLAY = (
    "eval/accuracy",
    "reward/mean",
    "env/turns",
    "env/failed_frac",
    "env/tool_error_rate",
)
"""The panels of a comparison page: one metric each (its title), one curve per cell."""


def scale(values: list[float], low: float, high: float, start: float, end: float) -> list[float]:
    """`values` mapped linearly from [low, high] onto [start, end] (a flat range onto its
    middle)."""
    if high == low:
        return [(start + end) / 2 for _ in values]
    return [start + (v - low) * (end - start) / (high - low) for v in values]


def panel_svg(title: str, series: dict[str, tuple[list[float], list[float]]]) -> str:
    """One panel: axes with their ranges, a polyline (and dots) per metric, a legend (the
    panel grows by a line for each metric past two)."""
    height = HEIGHT + 12 * max(0, len(series) - 2)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{esc(title)}"><text x="{WIDTH / 2}" y="16" '
        f'text-anchor="middle" font-size="13">{esc(title)}</text>'
    )
    if not series:
        return (
            head
            + f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" '
            + ('font-size="12" fill="#888">not logged</text></svg>')
        )
    xs = [x for x_values, _ in series.values() for x in x_values]
    ys = [y for _, y_values in series.values() for y in y_values]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    bottom = HEIGHT - BOTTOM
    parts = [head, _axes(x0, x1, y0, y1)]
    for i, (name, (x_values, y_values)) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        px = scale(x_values, x0, x1, LEFT, WIDTH - RIGHT)
        py = scale(y_values, y0, y1, bottom, TOP)
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(px, py, strict=True))
        parts.append(
            f'<polyline class="curve" data-metric="{esc(name)}" fill="none" '
            f'stroke="{color}" stroke-width="1.5" points="{points}"/>'
        )
        if len(px) <= 30:  # sparse series (eval every N steps): dots show where data is
            parts += [
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}"/>'
                for x, y in zip(px, py, strict=True)
            ]
        parts.append(
            f'<text x="{LEFT + 4}" y="{bottom + 30 + 12 * i}" font-size="11" '
            f'fill="{color}">— {esc(name)}</text>'
        )
    return "".join(parts) + "</svg>"


def _axes(x0: float, x1: float, y0: float, y1: float) -> str:
    bottom = HEIGHT - BOTTOM
    return (
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{bottom - TOP}" '
        f'fill="none" stroke="#bbb"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10">{y1:.3g}</text>'
        f'<text x="{LEFT - 4}" y="{bottom}" text-anchor="end" font-size="10">{y0:.3g}</text>'
        f'<text x="{LEFT}" y="{bottom + 13}" font-size="10">{x0:g}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{bottom + 13}" text-anchor="end" font-size="10">'
        f"step {x1:g}</text>"
    )


def series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]] | None:
    """(steps, values) of `key` over the records that logged it; None when none did."""
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not points:
        return None
    xs, ys = zip(*points, strict=True)
    return list(xs), list(ys)


def curves_html(records: list[dict[str, Any]]) -> str:
    """Every panel of curves.png as inline SVG, the episodes' panels after accuracy and
    reward for a multi-turn run."""
    from rlvr.runlog.plots import panel_series

    panels = panel_series(records).items()  # the episodes' panels too, for a multi-turn run
    return '<div class="curves">' + "".join(panel_svg(t, s) for t, s in panels) + "</div>"


def overlay_html(runs: dict[str, list[dict[str, Any]]]) -> str:
    """`OVERLAY`'s panels, one curve per run (name → its metrics records); a panel no run
    logged is left out."""
    panels = []
    for key in OVERLAY:
        found = {name: series(records, key) for name, records in runs.items()}
        drawn = {name: points for name, points in found.items() if points}
        if drawn or key.startswith("eval/"):
            panels.append(panel_svg(key, drawn))
    return '<div class="curves">' + "".join(panels) + "</div>"
