"""`rlvr show CMP_DIR`: an `rlvr compare --matrix` directory — its cells, each a run in
`CMP_DIR/cells/<label>-seed<k>/` — as a list (status, steps, final accuracy, episode
health) in the terminal, or as one page whose curves overlay the cells
(`--html`); one cell's completions are `rlvr show CMP_DIR/cells/<cell>`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.show.html_page import controls, esc, page
from rlvr.show.load import Run, ShowError, latest_metrics, load_run
from rlvr.show.svg import overlay_html
from rlvr.show.text import fmt

COLUMNS = (
    ("eval/accuracy", "accuracy"),
    ("reward/mean", "reward"),
    ("env/turns", "turns"),
    ("env/failed_frac", "failed"),
    ("env/tool_error_rate", "tool errors"),
)
"""The newest value of each, per cell; a column no cell logged is left out."""


@dataclass
class Comparison:
    path: Path
    cells: dict[str, Run]  # cell name → its run, in name order


def load_comparison(path: str | Path) -> Comparison:
    path = Path(path)
    folder = path / "cells"
    found = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if not found:
        raise ShowError(
            f"{path}: a comparison with no cells yet (no {folder}/<label>-seed<k>/); "
            f"`rlvr compare --matrix` writes them as it runs"
        )
    return Comparison(path, {cell.name: load_run(cell) for cell in found})


def status(run: Run) -> str:
    if run.summary is not None:
        return str(run.summary.get("status", "finished"))
    return "running or stopped" if run.metrics else "not started"


def cell_rows(comparison: Comparison) -> tuple[list[dict[str, str]], list[str]]:
    """One row per cell and the columns (the `COLUMNS` some cell logged)."""
    latest = {name: latest_metrics(run.metrics) for name, run in comparison.cells.items()}
    logged = [(key, title) for key, title in COLUMNS if any(key in v for v in latest.values())]
    rows = []
    for name, run in comparison.cells.items():
        last = run.metrics[-1].get("step") if run.metrics else "—"
        row = {
            "cell": name,
            "status": status(run),
            "steps": f"{last} of {run.config.get('steps', '?')}",
        }
        for key, title in logged:
            row[title] = fmt(latest[name][key][0]) if key in latest[name] else "—"
        rows.append(row)
    return rows, ["cell", "status", "steps", *(title for _, title in logged)]


def table(rows: list[dict[str, str]], columns: list[str]) -> str:
    """Aligned columns under a header line."""
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    line = lambda r: "  ".join(r[c].ljust(widths[c]) for c in columns).rstrip()  # noqa: E731
    return "\n".join(line(r) for r in [{c: c for c in columns}, *rows])


def comparison_text(comparison: Comparison) -> str:
    rows, columns = cell_rows(comparison)
    lines = [
        f"comparison {comparison.path}: {len(rows)} cells (newest values)",
        "",
        table(rows, columns),
        "",
        f"one cell: rlvr show {comparison.path / 'cells' / rows[0]['cell']} [--html]; "
        f"all cells' curves: rlvr show {comparison.path} --html",
    ]
    report = comparison.path / "report.md"
    if report.is_file():
        lines.append(f"the comparison's report: {report}")
    return "\n".join(lines)


def comparison_page(comparison: Comparison) -> str:
    """The cell list (filterable by condition) and the overlaid curves."""
    rows, columns = cell_rows(comparison)
    conditions = {name.rsplit("-seed", 1)[0] for name in comparison.cells}
    filters = {"all": "all cells", **{c: c for c in sorted(conditions)}}
    cards = "".join(_cell_card(row, columns) for row in rows)
    body = "".join(
        [
            f"<h1>rlvr comparison {esc(comparison.path.resolve().name)}</h1>",
            f'<h2>Cells</h2>{controls(None, None, filters)}<section class="rows" id="cells">'
            f"{cards}</section>",
            "<h2>Curves (one per cell)</h2>",
            overlay_html({name: run.metrics for name, run in comparison.cells.items()}),
        ]
    )
    return page(f"rlvr comparison {comparison.path.resolve().name}", body)


def _cell_card(row: dict[str, Any], columns: list[str]) -> str:
    condition = row["cell"].rsplit("-seed", 1)[0]
    finished = row["status"] == "finished"
    values = " · ".join(f"{esc(c)} <b>{esc(row[c])}</b>" for c in columns[1:])
    return (
        f'<article class="row cell{" correct" if finished else ""}" data-tags="{esc(condition)}">'
        f'<div class="head"><b>{esc(row["cell"])}</b> · {values}</div>'
        f'<pre class="prompt">rlvr show cells/{esc(row["cell"])}</pre></article>'
    )


def write_comparison_page(comparison: Comparison, path: str | Path) -> str:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(comparison_page(comparison))
    return f"{len(comparison.cells)} cells, curves overlaid"
