"""A memory cgroup per python-sandbox call, where the host lets the launcher make one: all
the call's processes together, with the pages of its tmpfs, hold at most `memory_mb +
disk_mb` (security audit F5). Standard library only (the launcher imports it).

RLIMIT_AS bounds each process's address space; the cgroup bounds their sum, which
`max_processes × memory_mb` would otherwise allow. It is made under the launcher's own
memory cgroup: cgroup v2 where that cgroup delegates the memory controller to its children,
else cgroup v1's memory hierarchy. Where neither can be written (a non-root trainer without
delegation, a container with cgroups read-only), the call runs without one and reports it.
"""

from __future__ import annotations

import contextlib
import os
import time

ROOTS = {"v2": "/sys/fs/cgroup", "v1": "/sys/fs/cgroup/memory"}
LIMIT_FILES = {"v2": ("memory.max", "memory.swap.max"),
               "v1": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")}  # fmt: skip
PREFIX = "rlvr-sandbox-"


def own_cgroups() -> dict[str, str]:
    """This process's memory cgroup directory, by version, from /proc/self/cgroup."""
    found = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "" and os.path.isfile(f"{ROOTS['v2']}/cgroup.controllers"):
                found["v2"] = ROOTS["v2"] + path
            elif "memory" in controllers.split(","):
                found["v1"] = ROOTS["v1"] + path
    return found


def make(limit_bytes: int) -> str | None:
    """A fresh memory cgroup limited to `limit_bytes` (swap included), or None."""
    for version, parent in own_cgroups().items():
        if version == "v2" and not _delegates_memory(parent):
            continue
        _remove_stale(parent)
        path = f"{parent}/{PREFIX}{os.getpid()}"
        try:
            os.mkdir(path, 0o755)
        except OSError:
            continue
        try:
            memory, swap = LIMIT_FILES[version]
            _write(f"{path}/{memory}", str(limit_bytes))
            if os.path.exists(f"{path}/{swap}"):  # v1: the sum with swap; v2: swap alone
                _write(f"{path}/{swap}", str(limit_bytes if version == "v1" else 0))
            return path
        except OSError:
            remove(path)
    return None


def opener(path: str) -> int:
    """A descriptor of the cgroup's `cgroup.procs`, taken while the host's cgroup file
    system is in view (the sandbox's own root does not show it); not inherited by exec."""
    return os.open(f"{path}/cgroup.procs", os.O_WRONLY)


def join(procs: int) -> None:
    """Move this process into the cgroup whose `cgroup.procs` is open as `procs`."""
    os.write(procs, b"0")


def oom_kills(path: str) -> int:
    """How many of the cgroup's processes the kernel killed for going over its limit."""
    for name in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, ValueError), open(f"{path}/{name}") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def remove(path: str, limit_s: float = 2.0) -> None:
    """Remove the cgroup once its processes are gone (reaped ones may take a moment)."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def _remove_stale(parent: str) -> None:
    """Remove the cgroups of launchers that are gone (killed before they removed theirs)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            pid = name.removeprefix(PREFIX)
            if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(OSError):
                    os.rmdir(f"{parent}/{name}")


def _delegates_memory(parent: str) -> bool:
    with contextlib.suppress(OSError), open(f"{parent}/cgroup.subtree_control") as f:
        return "memory" in f.read().split()
    return False


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
