"""The host uid a python-sandbox call runs as when the trainer is root: one per concurrent
call, in any process, held by a file lock.

The locks live in LOCK_DIR, a directory of root's that does not depend on `$TMPDIR`: two
trainers with different temporary directories share it, and another local user cannot make
it first (security audit F8). It must belong to the euid with mode 0700, and lock files are
opened without following symlinks. A uid's lock is released only once its call's processes
are known to be gone: when that cannot be shown, the lock is kept for the rest of this
process's life, so no later call is given a uid whose processes may still live (F2).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import stat
import warnings
from collections.abc import Callable, Iterator

LOCK_DIR = "/run/rlvr-sandbox-uids"
UID_COUNT = 1024
"""Sandbox uids are first_uid … first_uid + UID_COUNT − 1, one per concurrent call."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the code it ran); the tool call becomes an error."""


_counter = itertools.count()
_kept: dict[int, int] = {}
"""uid → lock fd of the uids whose processes could not be shown gone: never released."""


@contextlib.contextmanager
def sandbox_uid(first_uid: int, settled: Callable[[int], bool]) -> Iterator[int | None]:
    """A host uid no other call is using, locked for the call; None when not root (the code
    then runs as the trainer's user). After the call, `settled(uid)` must say its processes
    are gone (sweeping them if need be) for the lock to be released."""
    if os.geteuid() != 0:
        yield None
        return
    directory = _lock_dir()
    try:
        uid, fd = _take(directory, first_uid)
    finally:
        os.close(directory)
    try:
        yield uid
    finally:
        _release(uid, fd, settled)


def _take(directory: int, first_uid: int) -> tuple[int, int]:
    start = os.getpid() * 7 + next(_counter)  # spread processes and calls; no shared RNG
    for k in range(UID_COUNT):
        uid = first_uid + (start + k) % UID_COUNT
        try:
            fd = os.open(str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=directory)
        except OSError as error:
            raise SandboxError(f"cannot open the lock {LOCK_DIR}/{uid}: {error.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise SandboxError(f"all {UID_COUNT} sandbox uids from {first_uid} are in use")


def _release(uid: int, fd: int, settled: Callable[[int], bool]) -> None:
    try:
        gone = settled(uid)
    except Exception:  # whatever failed, the processes may live
        gone = False
    if gone:
        os.close(fd)  # releases the lock
        return
    _kept[uid] = fd
    warnings.warn(
        f"python sandbox: processes of uid {uid} could not be shown gone; the uid stays "
        f"locked until this process ends (a later call given it sweeps it first)",
        RuntimeWarning,
        stacklevel=4,
    )


def _lock_dir() -> int:
    """A descriptor of LOCK_DIR, made if missing; refused unless it is a directory of this
    euid that no one else may enter."""
    with contextlib.suppress(FileExistsError):
        try:
            os.mkdir(LOCK_DIR, 0o700)
        except FileNotFoundError:
            raise SandboxError(
                f"cannot make the sandbox's uid lock directory {LOCK_DIR}: its parent is missing"
            ) from None
    try:
        fd = os.open(LOCK_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise SandboxError(
            f"{LOCK_DIR} is not a directory ({error.strerror}): remove it and retry"
        ) from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise SandboxError(
            f"{LOCK_DIR} must belong to uid {os.geteuid()} with mode 0700; it belongs to uid "
            f"{info.st_uid} with mode {oct(stat.S_IMODE(info.st_mode))}: remove it and retry"
        )
    return fd
