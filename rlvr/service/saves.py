"""Where the service writes a save, and how (security audit F15–F17).

- A relative name stays inside the root: no `..`, no part starting with `.`, and the
  resolved path (symlinks followed) must lie under the resolved root. An absolute name is
  taken as asked for only where the client allows it (`ServiceClient(absolute_saves=...)`).
- A save replaces only a save: a directory holding `MARKER` (or, written by an older
  rlvr.service, `manifest.json`). Anything else under that name is refused, never deleted.
- A save is written under a name of its own (`.NAME.tmp-<pid>-<random>`) and put in place
  by one atomic rename (`renameat2(RENAME_EXCHANGE)` when it replaces a save), under an
  exclusive `flock` on a lock file beside it: two processes saving one name take turns,
  and a kill at any moment leaves either the old save or the new one at NAME.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

MARKER = ".rlvr-service-save"
LEGACY_MARKERS = ("manifest.json",)
LOCKS = ".locks"


def save_path(root: Path, name: str, absolute_ok: bool = True) -> Path:
    """root/name, or `name` itself when absolute and `absolute_ok`; a name that would land
    outside the root, or that names a hidden file, is refused in one line."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"save name={name!r} must be a non-empty string")
    path = Path(name)
    if path.is_absolute():
        if not absolute_ok:
            raise ValueError(f"save name={name!r} is absolute; give a name inside the root")
        return path
    if any(part in ("..", "") or part.startswith(".") for part in path.parts):
        raise ValueError(
            f"save name={name!r} must stay inside the root: no '..' and no part starting with '.'"
        )
    root = Path(root)
    target = root / path
    resolved_root = root.resolve()
    if not target.resolve().is_relative_to(resolved_root):
        raise ValueError(
            f"save name={name!r} resolves to {str(target.resolve())!r}, outside the root "
            f"{str(resolved_root)!r} (through a symbolic link)"
        )
    return target


def is_save(path: Path) -> bool:
    """Whether `path` is a directory a save wrote (and so may be replaced by one)."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    return any((path / m).is_file() for m in (MARKER, *LEGACY_MARKERS))


def write_save(
    target: Path, kind: str, write: Callable[[Path], None], overwrite: bool, what: str
) -> Path:
    """Run `write(directory)` on a fresh directory and put it at `target` atomically;
    an existing `target` is replaced only with `overwrite` and only if it is a save."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target):
        exists = target.exists() or target.is_symlink()
        if exists and not overwrite:
            raise ValueError(f"{what}: {str(target)!r} exists; pass overwrite=True to replace it")
        if exists and not is_save(target):
            raise ValueError(
                f"{what}: {str(target)!r} exists and is not a directory this service saved; "
                "it is left as it is (choose another name)"
            )
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            tmp.mkdir()
            write(tmp)
            (tmp / MARKER).write_text(json.dumps({"kind": kind, "name": target.name}))
            if exists:
                _exchange(tmp, target)  # tmp now holds the old save
            else:
                os.rename(tmp, target)
            _fsync_dir(target.parent)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """An exclusive flock per save name, on a file under the parent's `.locks/`."""
    locks = target.parent / LOCKS
    locks.mkdir(exist_ok=True)
    key = hashlib.sha256(target.name.encode()).hexdigest()[:16]
    with open(locks / f"{key}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories in one atomic step (Linux `renameat2`); where that does not
    exist, two renames, with the old save set aside first (a kill between them leaves the
    old save beside NAME as `.NAME.tmp-*`, never deleted)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        args = (AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
        if renameat2(*args) == 0:
            return
    aside = b.with_name(f".{b.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
