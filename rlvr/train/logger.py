"""Metrics out: one JSON line per step in `metrics.jsonl`, and TensorBoard events.

The metric names are a contract (docs/metrics.md): namespaced `reward/`, `rollout/`,
`loss/`, `clip/`, `policy/`, `train/`, `time/`, `eval/`. What is logged is what was used.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Appends records to `DIR/metrics.jsonl` and mirrors scalars to TensorBoard."""

    def __init__(
        self,
        out_dir: Path,
        tensorboard: bool = True,
        records: list[dict[str, Any]] | None = None,
        purge_step: int | None = None,
    ) -> None:
        """`records`: those already in metrics.jsonl (a resumed run appends after them);
        `purge_step`: TensorBoard drops the events logged at or after it by the
        interrupted invocation, so the run continues as one curve."""
        self.path = out_dir / "metrics.jsonl"
        self.records: list[dict[str, Any]] = list(records or [])
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(
                log_dir=str(out_dir / "tensorboard"), purge_step=purge_step if records else None
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _finite(v) for k, v in sorted(metrics.items())}}
        self.records.append(record)
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if value is not None and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def sync(self) -> None:
        """Force metrics.jsonl and the TensorBoard events to disk (before a checkpoint)."""
        if self.path.exists():
            with self.path.open("rb") as fh:
                os.fsync(fh.fileno())
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a `metrics.jsonl` file."""
    with Path(path).open() as fh:
        return [json.loads(line) for line in fh if line.strip()]
