"""Which processes a sandbox uid has, read from /proc by the trainer and by the launcher.

Standard library only: the launcher (`python -I -S sandbox_launcher.py`) imports it from its
own directory. `/proc/PID/status` is read as bytes and only its `Uid:`, `State:` and
`Threads:` lines are decoded: the `Name:` line is whatever bytes a process chose
(`prctl(PR_SET_NAME)`), not valid UTF-8 at all (security audit F2). A process that
vanishes or shows anything unexpected is skipped; it never breaks the scan of the others.
"""

from __future__ import annotations

import os

FIELDS = (b"Uid", b"State", b"Threads")


def status_of(pid: str) -> dict[str, list[str]] | None:
    """The Uid, State and Threads fields of /proc/PID/status, split on whitespace; None
    when the process is gone. The kernel escapes a newline in a name, so a name cannot
    forge a line; the last occurrence wins all the same (the real lines follow Name)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    found = {}
    for line in raw.split(b"\n"):
        key, colon, value = line.partition(b":")
        if colon and key in FIELDS:
            found[key.decode()] = value.decode("ascii", errors="replace").split()
    return found


def _pids() -> list[str]:
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def processes_of(uid: int) -> dict[int, str]:
    """{pid: state letter} of the processes with `uid` as one of their uids, but this one."""
    found = {}
    for pid in _pids():
        if int(pid) == os.getpid():
            continue
        status = status_of(pid)
        try:
            if str(uid) in status["Uid"]:
                found[int(pid)] = status["State"][0]
        except (TypeError, KeyError, IndexError):
            continue  # it is gone, or its status is not what a live process shows
    return found


def tasks_of(uid: int) -> int:
    """Processes and threads of `uid`, as RLIMIT_NPROC counts them."""
    total = 0
    for pid in _pids():
        status = status_of(pid)
        try:
            if int(status["Uid"][0]) == uid:
                total += int(status["Threads"][0])
        except (TypeError, KeyError, IndexError, ValueError):
            continue
    return total
