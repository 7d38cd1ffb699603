"""Metrics out: one JSON line per step in `metrics.jsonl`, fanned out to the trackers.

The metric names are a contract (docs/metrics.md): namespaced `reward/`, `rollout/`,
`loss/`, `clip/`, `policy/`, `train/`, `time/`, `eval/`. What is logged is what was used.
metrics.jsonl is the record; the trackers (`rlvr.runlog.trackers`: TensorBoard by default)
each receive the same finite values. A tracker that fails while the run goes on is warned
about once and closed: the run and metrics.jsonl are not its hostages.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

from rlvr.runlog.trackers import Tracker, finite


class MetricsLogger:
    """Appends records to `DIR/metrics.jsonl` and hands each to the trackers."""

    def __init__(
        self,
        out_dir: Path,
        records: list[dict[str, Any]] | None = None,
        trackers: list[Tracker] | None = None,
    ) -> None:
        """`records`: those already in metrics.jsonl (a resumed run appends after them)."""
        self.path = out_dir / "metrics.jsonl"
        self.records: list[dict[str, Any]] = list(records or [])
        self.trackers: list[Tracker] = list(trackers or [])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _finite(v) for k, v in sorted(metrics.items())}}
        self.records.append(record)
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        values = finite(metrics)
        self._each(lambda t: t.log_metrics(step, values))

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        """`rows` (completions rows) to the trackers that have tables."""
        self._each(lambda t: t.log_table(step, name, rows) if t.has_tables else None)

    def _each(self, call) -> None:
        for tracker in list(self.trackers):
            try:
                call(tracker)
            except Exception as err:
                self.trackers.remove(tracker)
                warnings.warn(
                    f"report_to: {tracker.name!r} failed ({type(err).__name__}: {err}); it "
                    f"is closed for the rest of the run, metrics.jsonl goes on",
                    stacklevel=3,
                )
                _close_quietly(tracker)

    def sync(self) -> None:
        """Force metrics.jsonl to disk (before a checkpoint); trackers flush as they log."""
        if self.path.exists():
            with self.path.open("rb") as fh:
                os.fsync(fh.fileno())

    def close(self) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close()


def _close_quietly(tracker: Tracker) -> None:
    with contextlib.suppress(Exception):  # it already failed; its first error was reported
        tracker.close()


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a `metrics.jsonl` file."""
    with Path(path).open() as fh:
        return [json.loads(line) for line in fh if line.strip()]
