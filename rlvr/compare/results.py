"""Read finished cells into eval-point rows (results.csv) and per-cell summaries.

The comparison reads only what every run writes: `summary.json`, `metrics.jsonl` and
`config.yaml`, with the metric names of docs/metrics.md.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlvr.compare.matrix import Cell
from rlvr.runlog.logger import read_metrics

EVAL_KEYS = (
    "eval/accuracy",
    "eval/greedy_accuracy",
    "eval/format_rate",
    "eval/response_length",
)
# Training metrics averaged over the steps since the previous eval point.
WINDOW_KEYS = (
    "reward/accuracy",
    "rollout/response_length",
    "clip/frac",
    "clip/low_frac",
    "clip/high_frac",
    "clip/seq_frac",
)
# Multi-turn runs: the episodes' health, averaged the same way (left empty for one-turn).
ENV_KEYS = (
    "env/turns",
    "env/tool_calls",
    "env/valid_call_rate",
    "env/tool_error_rate",
    "env/failed_frac",
    "env/observation_tokens",
    "env/ended_budget",
)
WINDOW_KEYS += ENV_KEYS
CUMULATIVE = {
    "generated_tokens": "rollout/generated_tokens",
    "discarded_tokens": "rollout/discarded_tokens",
    "rollout_s": "time/rollout_s",
    "train_s": "time/train_s",
    "eval_s": "time/eval_s",
}
COLUMNS = ("label", "recipe", "seed", "step", *CUMULATIVE, "wall_s", *EVAL_KEYS, *WINDOW_KEYS)
TIME_COLUMNS = ("rollout_s", "train_s", "eval_s", "wall_s")


@dataclass
class CellResult:
    """One finished cell: its eval-point rows, per-step records, summary and config."""

    cell: Cell
    rows: list[dict[str, Any]]
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]

    @property
    def items(self) -> np.ndarray:
        return np.asarray(self.summary["final_eval_items"], dtype=float)

    def mean_metric(self, key: str) -> float:
        """Mean of a per-step training metric over the steps that logged it (NaN if none)."""
        values = [r[key] for r in self.records if r.get("step", 0) > 0 and r.get(key) is not None]
        return float(np.mean(values)) if values else float("nan")


def eval_rows(cell: Cell, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per eval point: cumulative cost so far, eval metrics and window means."""
    totals = dict.fromkeys(CUMULATIVE, 0.0)
    window: dict[str, list[float]] = {k: [] for k in WINDOW_KEYS}
    rows = []
    for record in sorted(records, key=lambda r: r["step"]):
        if record["step"] < 0:
            continue  # critic pre-training: not policy training
        for column, key in CUMULATIVE.items():
            totals[column] += record.get(key) or 0.0
        for key in WINDOW_KEYS:
            if record.get(key) is not None:
                window[key].append(record[key])
        if record.get("eval/accuracy") is None:
            continue
        row = {"label": cell.label, "recipe": cell.recipe, "seed": cell.seed}
        row.update(step=record["step"], **totals, wall_s=record.get("time/wall_s") or 0.0)
        row.update({k: record.get(k) for k in EVAL_KEYS})
        row.update({k: float(np.mean(v)) if v else None for k, v in window.items()})
        rows.append(row)
        window = {k: [] for k in WINDOW_KEYS}
    return rows


def load_cell(cell: Cell) -> CellResult | None:
    """The results of a finished cell, or None if it has not finished."""
    out = Path(cell.config["out"])
    if not (out / "summary.json").exists():
        return None
    records = read_metrics(out / "metrics.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    config = yaml.safe_load((out / "config.yaml").read_text())
    return CellResult(cell, eval_rows(cell, records), records, summary, config)


def write_results_csv(results: list[CellResult], path: str | Path) -> Path:
    """results.csv: one row per cell and eval point, columns `COLUMNS`."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for result in results:
            for row in result.rows:
                writer.writerow({k: _cell_text(row.get(k)) for k in COLUMNS})
    return path


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
