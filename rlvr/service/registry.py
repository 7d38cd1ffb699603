"""The checkpoint registry: `ROOT/checkpoints.json` names every save under the root by a
URI (`rlvr://<path under the root>`) with what rebuilds its client (the base model and
the LoRA shape), so that a state one process saved is loaded by the next, as the remote
APIs' checkpoint URIs are. A URI is only ever looked up, never turned into a path, so a
crafted one cannot reach outside the root.

The file is rewritten whole (a temporary file, then one rename) under an exclusive
`flock`, so processes sharing a root never lose each other's entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FILE = "checkpoints.json"
SCHEME = "rlvr://"


class CheckpointRegistry:
    """URI → {kind, path (relative to the root), base_model, lora} for saves under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def register(self, path: Path, kind: str, base_model: str | None, lora: Any) -> str:
        """Record the save at `path` (inside the root) and return its URI."""
        relative = Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        uri = f"{SCHEME}{relative}"
        entry = {"kind": kind, "path": relative, "base_model": base_model, "lora": lora}
        with self._locked():
            entries = self._read()
            entries[uri] = entry
            self._write(entries)
        return uri

    def resolve(self, uri: str, kind: str | None = None) -> dict[str, Any]:
        """The entry of `uri`, with `path` made absolute; a one-line error naming the root
        if it is unknown (or of another kind than `kind`)."""
        entry = self._read().get(uri) if isinstance(uri, str) else None
        if entry is None:
            raise ValueError(
                f"checkpoint {uri!r:.120} is not in {str(self.root / FILE)!r}: it was not saved "
                "under this service's root"
            )
        if kind is not None and entry["kind"] != kind:
            raise ValueError(f"checkpoint {uri!r} holds {entry['kind']}, not {kind}")
        return {**entry, "path": str(self.root / entry["path"])}

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / FILE).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise ValueError(f"{str(self.root / FILE)!r} is not readable JSON: {err}") from None
        return data if isinstance(data, dict) else {}

    def _write(self, entries: dict[str, Any]) -> None:
        tmp = self.root / f".{FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
        os.replace(tmp, self.root / FILE)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{FILE}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def is_uri(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


def state_path(root: str | Path, path: str | Path) -> Path:
    """A state's directory: `path` itself, or what the root's registry names by a URI."""
    if is_uri(path):
        return Path(CheckpointRegistry(root).resolve(str(path), "state")["path"])
    return Path(path)
