"""Output-directory safety: a run never writes into, or over, what it was not asked to.

`check_out_dir` only reads: it runs before anything is written, so a rejected invocation
leaves the disk as it was. A directory that holds any of `RUN_FILES` is a run directory:
a new run refuses it unless `mode` is "resume" (continue it) or "overwrite" (replace it;
only the run's own files are removed, after every other check passed).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MODES = ("new", "resume", "overwrite")
RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "summary.json",
    "summary.partial.json",
    "curves.png",
    "tensorboard",
    "completions",
    "trackers",
    "show.html",  # rlvr show --html: a view of the run, stale once the run is replaced
)
RUN_PREFIXES = ("checkpoint",)


def run_files(directory: Path) -> list[Path]:
    """The files and folders in `directory` that a training run writes."""
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if p.name in RUN_FILES or p.name.startswith(RUN_PREFIXES)
    )


def check_out_dir(out: str, mode: str) -> Path:
    """Validate `out` for `mode` without writing anything; returns it as a Path."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is unknown; valid: {', '.join(MODES)}")
    if not str(out).strip():
        raise ValueError("out must name an output directory, got an empty string")
    path = Path(out).expanduser()
    resolved = path.resolve()
    unsafe = {Path.cwd().resolve(), Path.home().resolve(), Path(resolved.anchor)}
    if resolved in unsafe:
        raise ValueError(
            f"out={str(out)!r} is {resolved}, the current, home or root directory; "
            f"name a directory of its own, e.g. runs/demo"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"out={str(out)!r} exists and is not a directory")
    existing = run_files(path)
    if mode == "new" and existing:
        raise ValueError(
            f"out={str(out)!r} already holds a run ({existing[0].name}); pass --resume "
            f"{out} to continue it or --overwrite to replace it"
        )
    if mode == "resume" and not (path / "config.yaml").is_file():
        raise ValueError(f"--resume {out}: no run to resume there (no config.yaml)")
    _check_writable(path)
    return path


def _check_writable(path: Path) -> None:
    """The nearest existing ancestor must be writable (or `path` itself, if it exists)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"out={str(path)!r} is not writable ({probe} is not)")


def clear_run(path: Path, keep: str | None = None) -> None:
    """Remove the files of the run in `path` but those named `keep...` (nothing else
    there is touched)."""
    for item in run_files(path):
        if keep and item.name.startswith(keep):
            continue
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item)
        else:
            item.unlink()
