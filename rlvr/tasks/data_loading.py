"""Rows of a dataset from a local JSONL / JSON / Parquet file or the Hugging Face hub.

A source is either a path (``data/gsm8k_train.jsonl``) or a mapping
``{path: ...}`` / ``{hub: openai/gsm8k, config: main, split: train, revision: ...}``.
Every row keeps the line (JSONL), index (JSON) or row number (Parquet, hub) it came from,
so a validation error can point at it. Field names may be dotted to reach into nested
columns: ``reward_model.ground_truth``; a list of chat messages yields the content of the
last user message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

SUFFIXES = (".jsonl", ".json", ".parquet")


class Row(NamedTuple):
    line: int
    """1-based line (JSONL), element (JSON) or row (Parquet, hub) number."""
    fields: dict[str, Any]


@dataclass(frozen=True)
class DataSource:
    """Where rows come from: a local ``path``, or a hub dataset ``hub`` with ``config``,
    ``split`` and ``revision``."""

    path: str | None = None
    hub: str | None = None
    config: str | None = None
    split: str = "train"
    revision: str | None = None

    @classmethod
    def parse(cls, value: Any, field: str = "data") -> DataSource:
        """A source from a config value: a path string or a mapping of the fields above."""
        if isinstance(value, DataSource):
            return value
        if isinstance(value, str | Path):
            return cls(path=str(value))
        if not isinstance(value, dict):
            raise ValueError(
                f"{field} must be a file path or a mapping with 'path' or 'hub', got {value!r}"
            )
        valid = {"path", "hub", "config", "split", "revision"}
        unknown = sorted(set(value) - valid)
        if unknown:
            raise ValueError(f"{field}: unknown key(s) {unknown}; valid keys: {sorted(valid)}")
        source = cls(**value)
        if (source.path is None) == (source.hub is None):
            raise ValueError(f"{field} needs exactly one of 'path' and 'hub', got {value!r}")
        return source

    def describe(self) -> str:
        if self.path is not None:
            return self.path
        extras = ", ".join(
            f"{k}={v}" for k in ("config", "split", "revision") if (v := getattr(self, k))
        )
        return f"hub:{self.hub} ({extras})"


def read_rows(source: DataSource) -> list[Row]:
    """Every row of ``source``, numbered; errors name the file and line."""
    if source.hub is not None:
        return _read_hub(source)
    path = Path(source.path)
    if not path.is_file():
        raise ValueError(f"data file {source.path!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return _read_json(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    raise ValueError(f"data file {source.path!r}: unknown format; use one of {', '.join(SUFFIXES)}")


def _read_jsonl(path: Path) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(value, dict):
                raise ValueError(
                    f"{path}:{number}: expected a JSON object, got {type(value).__name__}"
                )
            rows.append(Row(number, value))
    return rows


def _read_json(path: Path) -> list[Row]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{path}: expected a JSON list of objects")
    return [Row(i, v) for i, v in enumerate(value, start=1)]


def _read_parquet(path: Path) -> list[Row]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return [Row(i, v) for i, v in enumerate(table.to_pylist(), start=1)]


def _read_hub(source: DataSource) -> list[Row]:
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            "hub datasets need the 'datasets' package: pip install 'rlvr[hf]'"
        ) from err
    try:
        data = datasets.load_dataset(
            source.hub, source.config, split=source.split, revision=source.revision
        )
    except Exception as err:  # network, auth, unknown config: say which source failed
        raise ValueError(
            f"could not load {source.describe()}: {type(err).__name__}: {err}"
        ) from err
    return [Row(i, dict(v)) for i, v in enumerate(data, start=1)]


_MISSING = object()


def get_field(fields: dict[str, Any], name: str) -> Any:
    """``fields[name]``, following dots into nested mappings; a chat (a list of
    ``{"role", "content"}`` messages) gives its last user message. ``_MISSING`` if absent."""
    value: Any = fields
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m.get("content") for m in value if m.get("role") == "user"]
        return users[-1] if users else _MISSING
    return value


def has_column(fields: dict[str, Any], name: str) -> bool:
    """Whether ``name`` (dots reach into nested mappings) is a column of the row, whatever
    its value."""
    value: Any = fields
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def is_missing(value: Any) -> bool:
    return value is _MISSING
