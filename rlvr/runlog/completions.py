"""The completions table's files: `RUN/completions/step_{step:06d}.jsonl`, one JSON object
per row (`rlvr.train.records.completion_rows` makes them; docs/metrics.md gives the
schema), and `RUN/completions/index.json`, the steps written. The trackers that have
tables get the same rows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEMA = 1
FOLDER = "completions"


class CompletionsLog:
    """`RUN/completions/`: a step's rows, and the index of the steps written.

    A resumed run redoes the steps after its checkpoint: their files, written by the
    interrupted invocation, are removed when it starts (`resumed_step`), so every file
    there is one the run as a whole wrote once."""

    def __init__(self, out: Path, every: int, rows: int, resumed_step: int | None) -> None:
        self.folder = out / FOLDER
        self.every, self.rows = every, rows
        if resumed_step is not None and self.folder.is_dir():
            for step in self.steps():
                if step > resumed_step:
                    (self.folder / step_file(step)).unlink()
            self._write_index()

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def steps(self) -> list[int]:
        """The steps whose files are in the folder."""
        names = self.folder.glob("step_*.jsonl") if self.folder.is_dir() else []
        return sorted(int(p.stem.removeprefix("step_")) for p in names)

    def write(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        _write_atomic(self.folder / step_file(step), text)
        self._write_index()

    def _write_index(self) -> None:
        index = {"schema": SCHEMA, "every": self.every, "rows_per_step": self.rows}
        _write_atomic(self.folder / "index.json", json.dumps({**index, "steps": self.steps()}))


def step_file(step: int) -> str:
    return f"step_{step:06d}.jsonl"


def read_completions(out: str | Path, step: int) -> list[dict[str, Any]]:
    """The rows written for `step` in the run directory `out`."""
    path = Path(out) / FOLDER / step_file(step)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
