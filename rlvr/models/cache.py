"""rlvr's on-disk cache: where the embedded model's warm starts and converted GGUF models
are kept, and the lock that lets one process build an entry while others wait."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else `$RLVR_CACHE`, else `~/.cache/rlvr`."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr"))


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """An advisory inter-process lock (fcntl) held for the duration of the block."""
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
