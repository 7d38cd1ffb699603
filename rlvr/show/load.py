"""What `rlvr show` reads: a run directory (config.yaml, metrics.jsonl, completions/) or an
`rlvr eval --items` file, with errors that name the file, the line and what was expected.

The completions files are written by the training run (rlvr/runlog/completions.py): one
JSON object per sampled row in `RUN/completions/step_{step:06d}.jsonl`, the steps listed
in `RUN/completions/index.json`, every key defined in docs/metrics.md ("Completions"). A
run that logged none (an older run, or `completions_every: 0`) is still shown: config and
metrics.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1
SEGMENT_KINDS = ("policy", "observation", "forced", "masked")
ROW_REQUIRED = ("step", "prompt", "completion", "reward", "correct")
ITEMS_REQUIRED = ("uid", "n", "avg")  # rlvr/eval/paired.py's REQUIRED, kept in step
NO_COMPLETIONS = "no completions logged (completions_every=0 or an older run)"


class ShowError(ValueError):
    """A path `rlvr show` cannot show; the message names it and what was expected."""


@dataclass
class Run:
    """A run directory as `rlvr show` sees it."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    summary: dict[str, Any] | None
    index: dict[str, Any] | None  # completions/index.json (None: no completions logged)
    steps: list[int] = field(default_factory=list)  # steps with a completions file

    def rows(self, step: int) -> list[dict[str, Any]]:
        """The completions logged at `step` (a step of `self.steps`)."""
        if step not in self.steps:
            raise ShowError(_missing_step(self, step))
        return read_rows(completions_file(self.path, step))


def completions_file(run: Path, step: int) -> Path:
    return run / "completions" / f"step_{step:06d}.jsonl"


def detect_kind(path: str | Path) -> str:
    """'run' (a run directory, or its config.yaml / metrics.jsonl), 'comparison' (an
    `rlvr compare --matrix` directory) or 'items' (an `rlvr eval --items` file), told by
    content, not by name."""
    path = Path(path)
    if not path.exists():
        raise ShowError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "config.yaml").is_file() or (path / "metrics.jsonl").is_file():
            return "run"
        if (path / "matrix.yaml").is_file() or (path / "cells").is_dir():
            return "comparison"  # an `rlvr compare --matrix` directory
        raise ShowError(
            f"{path}: not a run directory (no config.yaml or metrics.jsonl) nor a comparison "
            "(no matrix.yaml or cells/); rlvr show takes a run directory, an `rlvr compare` "
            "directory, an `rlvr eval --items` file, or two items files"
        )
    if path.name in ("config.yaml", "metrics.jsonl"):
        return "run"
    first = _first_object(path)
    if first is not None and all(key in first for key in ITEMS_REQUIRED):
        return "items"
    raise ShowError(
        f"{path}: neither a run directory nor an `rlvr eval --items` file (whose lines are "
        f"JSON objects with {', '.join(ITEMS_REQUIRED)})"
    )


def _first_object(path: Path) -> dict | None:
    try:
        with path.open() as handle:
            line = next((line for line in handle if line.strip()), "")
        value = json.loads(line)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def load_run(path: str | Path) -> Run:
    """Read the run in `path` (or the run whose config.yaml / metrics.jsonl `path` is)."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    config = _read_config(path / "config.yaml")
    metrics = (
        read_jsonl(path / "metrics.jsonl", what="metrics")
        if (path / "metrics.jsonl").is_file()
        else []
    )
    summary = _read_json(path / "summary.json") if (path / "summary.json").is_file() else None
    index, steps = _read_index(path)
    return Run(path, config, metrics, summary, index, steps)


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    import yaml

    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ShowError(f"{path}: cannot read the run's config ({err})") from None
    if not isinstance(config, dict):
        raise ShowError(f"{path}: expected a mapping of config keys, got {type(config).__name__}")
    return config


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ShowError(f"{path}: cannot read it as JSON ({err})") from None


def read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a bad last line (a run still writing it) is skipped
    with a warning, a bad line before it is an error naming the line."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ShowError(f"{path}: cannot read the {what} file ({err})") from None
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    records = []
    for position, (number, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if position == len(numbered) - 1:
                print(
                    f"rlvr: warning: {path}:{number}: incomplete last line skipped "
                    f"(a run still writing it?)",
                    file=sys.stderr,
                )
                break
            raise ShowError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise ShowError(f"{path}:{number}: expected a JSON object per line")
        records.append(record)
    return records


def _read_index(run: Path) -> tuple[dict[str, Any] | None, list[int]]:
    """completions/index.json and the steps that have a file (the index may lag a run that
    is still writing; files are the truth, the index gives `every` and `rows_per_step`)."""
    folder = run / "completions"
    if not folder.is_dir():
        return None, []
    index = _read_json(folder / "index.json") if (folder / "index.json").is_file() else {}
    if not isinstance(index, dict):
        raise ShowError(f"{folder / 'index.json'}: expected a JSON object")
    schema = index.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ShowError(
            f"{folder / 'index.json'}: schema={schema!r}; this rlvr reads schema {SCHEMA} "
            "(written by a different rlvr version?)"
        )
    steps = sorted(int(p.stem[5:]) for p in folder.glob("step_*.jsonl") if p.stem[5:].isdigit())
    return index, steps


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The completions of one step, each checked for the keys the views need."""
    rows = read_jsonl(path, what="completions")
    for number, row in enumerate(rows, start=1):
        missing = [key for key in ROW_REQUIRED if key not in row]
        if missing:
            raise ShowError(
                f"{path}: row {number} has no {', '.join(map(repr, missing))} "
                f"(every row has {', '.join(ROW_REQUIRED)}; see docs/metrics.md, Completions)"
            )
        for segment in row.get("segments") or []:
            if segment.get("kind") not in SEGMENT_KINDS:
                raise ShowError(
                    f"{path}: row {number}: segment kind {segment.get('kind')!r} is not one "
                    f"of {', '.join(SEGMENT_KINDS)}"
                )
    return rows


def segments(row: dict[str, Any]) -> list[dict[str, str]]:
    """The row's completion as runs of one token class (all policy when not logged)."""
    return row.get("segments") or [{"kind": "policy", "text": row["completion"]}]


def images(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The pictures a row's prompt showed (`images`, rlvr/runlog/completions.py): each
    `{"width", "height", "png"}`, `png` the base64 text of a PNG, or None when the record's
    is not one (a hand-edited file), so a view shows a marker and never a foreign data URI;
    `[]` for a text row."""
    out = []
    for image in row.get("images") or []:
        image = image if isinstance(image, dict) else {}
        width, height = image.get("width"), image.get("height")
        out.append(
            {
                "width": width if isinstance(width, int) else "?",
                "height": height if isinstance(height, int) else "?",
                "png": image["png"] if _is_png(image.get("png")) else None,
            }
        )
    return out


def _is_png(text: Any) -> bool:
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
        return False
    try:
        return base64.b64decode(text, validate=True).startswith(b"\x89PNG\r\n\x1a\n")
    except binascii.Error:
        return False


def _missing_step(run: Run, step: int) -> str:
    if not run.steps:
        return f"--step {step}: {run.path} has {NO_COMPLETIONS}"
    shown = ", ".join(map(str, run.steps[:5])) + (", ..." if len(run.steps) > 5 else "")
    return (
        f"--step {step}: no completions logged at that step in {run.path}; logged steps: "
        f"{shown} (last {run.steps[-1]})"
    )


def latest_metrics(metrics: list[dict[str, Any]], step: int | None = None) -> dict[str, tuple]:
    """Metric name → (value, step it was logged at): each metric's newest value at or
    before `step` (None: the end of the run). Eval metrics are logged every eval_every
    steps, so their step is often earlier than the others'."""
    latest: dict[str, tuple] = {}
    for record in metrics:
        at = record.get("step")
        if step is not None and isinstance(at, int) and at > step:
            break
        for name, value in record.items():
            if name != "step" and value is not None:
                latest[name] = (value, at)
    return latest
