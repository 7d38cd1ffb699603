"""The python sandbox's launcher: a trusted script, run as `python -I -S sandbox_launcher.py
CONFIG RUNNER CODE` by `rlvr.tools.python_sandbox`, that builds the sandbox and runs the
code in it. Standard library only; it never imports rlvr.

As root: a private mount, PID, network and IPC namespace (ctypes `unshare`), in which every
mount is read-only, /tmp and /dev/shm are fresh small tmpfs, /proc shows only the sandbox,
and directories an unprivileged user cannot enter on the way to the interpreter (a 0700
/root holding pyenv) are replaced by a tmpfs that shows only the interpreter. The code runs
as a dedicated uid (`CONFIG["uid"]`), so RLIMIT_NPROC binds and nothing outside /tmp is
writable; every process of that uid is killed before and after (`sweep`).
Not root: the same namespaces inside an unprivileged user namespace where the kernel
allows one; else only the resource limits and the process group.

Processes: this launcher (host PID namespace) → `init` (PID 1 of the new namespace: mounts,
then reaps) → the user process. When the user process exits, init exits and the kernel
kills everything left in the namespace. Reports (one JSON object a line) go to stderr; the
user's stdout and stderr go to stdout. `CONFIG = {"sweep": uid}` only sweeps that uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MNT_DETACH = 1 << 18, 1 << 21, 2
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}
INNER_UID = 1000
"""The user's uid inside an unprivileged user namespace (not 0: exec then drops the
namespace's capabilities, so the code cannot undo the mounts)."""
SETUP_FAILED = 125
WORKDIR = "/tmp/work"

libc = ctypes.CDLL(None, use_errno=True)


def report(**fields) -> None:
    os.write(2, (json.dumps(fields) + "\n").encode())


def sweep(uid: int, limit_s: float = 2.0) -> bool:
    """Kill every process of `uid`: a helper of that uid sends kill(-1, SIGKILL) (every
    process it may signal, at once) until /proc shows none alive, then waits a moment for
    their parents to reap them; orphans reparented here are reaped meanwhile. True when
    none is left alive."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            deadline = time.monotonic() + limit_s
            while (found := processes_of(uid)) and time.monotonic() < deadline:
                if any(state != "Z" for state in found.values()):
                    os.kill(-1, signal.SIGKILL)  # succeeds even when it may signal none
                time.sleep(0.005)
            alive = any(state != "Z" for state in processes_of(uid).values())
            os._exit(1 if alive else 0)
        finally:
            os._exit(1)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == helper:
            return os.waitstatus_to_exitcode(status) == 0


def processes_of(uid: int) -> dict[int, str]:
    """{pid: state letter} of the processes with `uid` as one of their uids, but this one."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if str(uid) in status["Uid"].split():
                found[int(name)] = status["State"].split()[0]
        except (OSError, KeyError, IndexError):
            continue  # it is gone
    return found


def tasks_of(uid: int) -> int:
    """Processes and threads of `uid`, as RLIMIT_NPROC counts them."""
    total = 0
    for name in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{name}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if int(status["Uid"].split()[0]) == uid:
                total += int(status["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return total


def mount(source, target, fstype, flags, data=None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


def unshare(root: bool) -> bool:
    """New mount, PID, network and IPC namespaces (and, not root, a user namespace in
    which this user is INNER_UID); False where the kernel refuses."""
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
    uid, gid = os.getuid(), os.getgid()
    if not hasattr(libc, "unshare") or libc.unshare(flags | (0 if root else CLONE_NEWUSER)):
        return False
    if not root:
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{INNER_UID} {uid} 1"),
            ("gid_map", f"{INNER_UID} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    return True


def mounts() -> list[tuple[str, int]]:
    """(mount point, flags to keep) of every mount, parents first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])  # \040: ' '
            keep = sum(OPTION_FLAGS.get(o, 0) for o in fields[5].split(","))
            found.append((point, keep))
    return found


def inaccessible_ancestor(path: str) -> str | None:
    """The outermost directory on the way to `path` that others may not enter."""
    here = "/"
    for part in path.strip("/").split("/"):
        here = os.path.join(here, part)
        if os.path.isdir(here) and not os.stat(here).st_mode & 0o001:
            return here
    return None


def reveal(paths: list[str], disk_mb: int) -> None:
    """Make each of `paths` reachable by an unprivileged user at its own path: a tmpfs
    replaces the directory that may not be entered, and only `paths` are bound into it."""
    hidden = {p: a for p in paths if (a := inaccessible_ancestor(p))}
    for i, path in enumerate(hidden):
        os.makedirs(f"/tmp/.stage/{i}")
        mount(path, f"/tmp/.stage/{i}", None, MS_BIND | MS_REC)
    for ancestor in sorted(set(hidden.values())):
        mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=755")
    for i, path in enumerate(hidden):
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(f"/tmp/.stage/{i}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        libc.umount2(f"/tmp/.stage/{i}".encode(), MNT_DETACH)
    if hidden:
        shutil.rmtree("/tmp/.stage")
    for ancestor in set(hidden.values()):
        mount(None, ancestor, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def keep_from_host_tmp(host_tmp: int, paths: list[str]) -> None:
    """Bind each of `paths` that lies under the host's /tmp (e.g. a virtual environment in
    a clone there) at its own path inside the fresh /tmp, read-only; `host_tmp` is an
    O_PATH descriptor of the host's /tmp, taken before the tmpfs covered it."""
    for path in paths:
        if not path.startswith("/tmp/"):
            continue
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(f"/proc/self/fd/{host_tmp}/{path[len('/tmp/') :]}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_view(config: dict) -> dict:
    """The sandbox's file system: everything read-only but a fresh /tmp (the working
    directory in it) and /dev/shm; /proc of the new PID namespace."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    failed = []
    for point, keep in mounts():
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            failed.append(point)
    size = f"size={config['disk_mb']}m"
    host_tmp = os.open("/tmp", os.O_PATH)  # the interpreter may live under it (a venv in /tmp)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=1777")
    keep_from_host_tmp(host_tmp, config["reveal"])
    os.close(host_tmp)
    reveal(config["reveal"], config["disk_mb"])
    if os.path.isdir("/dev/shm"):
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=1777")
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        own_proc = True
    except OSError:
        own_proc = False
    os.mkdir(WORKDIR, 0o700)
    return {"read_only_root": "/" not in failed, "own_proc": own_proc}


def set_limits(config: dict) -> None:
    mb = 1024 * 1024
    limits = {
        resource.RLIMIT_AS: config["memory_mb"] * mb,
        resource.RLIMIT_FSIZE: config["file_size_mb"] * mb,
        resource.RLIMIT_NOFILE: config["max_open_files"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NPROC: config["max_processes"],
    }
    for kind, value in limits.items():
        resource.setrlimit(kind, (value, value))
    cpu_s = config["cpu_s"]  # SIGXCPU at the soft limit; SIGKILL at the hard one
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))


def run_user(config: dict, runner: str, code: str, workdir: str) -> int:
    """In the forked user process: limits, working directory, uid, then exec the
    interpreter; SETUP_FAILED (reported) when that fails."""
    errors = os.dup(2)  # close-on-exec: reports a failure to exec, then closes
    try:
        os.setpgid(0, 0)
        os.chdir(workdir)
        set_limits(config)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(1, 2)
        if config["uid"] is not None:
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
        python = config["python"]
        flags = ["-I", "-u", "-X", "utf8"] + ([] if config["site_packages"] else ["-S"])
        argv = [python, *flags, "-c", runner, code, str(config["memory_mb"])]
        os.execve(python, argv, {**config["env"], "HOME": workdir, "TMPDIR": workdir})
    except BaseException as error:
        os.write(errors, (json.dumps({"error": f"starting python: {error}"}) + "\n").encode())
    return SETUP_FAILED


def wait_for(pid: int) -> int:
    """Reap children (orphans too) until `pid` exits; its exit code (−signal if killed)."""
    while True:
        done, status = os.waitpid(-1, 0)
        if done == pid:
            return os.waitstatus_to_exitcode(status)


def init(config: dict, runner: str, code: str) -> int:
    """PID 1 of the sandbox's namespace: its exit kills every process left in it."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: so is the namespace
    try:
        view = build_view(config)
        if config["uid"] is not None:
            os.chown(WORKDIR, config["uid"], config["uid"])
    except OSError as error:
        report(error=f"building the sandbox's file system: {error}")
        return SETUP_FAILED
    report(**view)
    return exit_code(wait_for(start(lambda: run_user(config, runner, code, WORKDIR))))


def exit_code(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


STARTED: list[int] = []
"""The child whose end ends the call: init, or (without namespaces) the user process."""


def stop(signum: int, frame: object) -> None:
    """SIGTERM, the trainer's "stop now": kill the call's child (and its process group);
    main then reaps it (with namespaces, after the kernel reaped all else) and sweeps."""
    for pid in STARTED:
        for kill in (os.kill, os.killpg):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)


def start(child: Callable[[], int]) -> int:
    """Fork `child`, SIGTERM held until its pid is in STARTED (so stop never misses it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os._exit(child())
    STARTED.append(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    return pid


def main(config: dict, runner: str, code: str) -> int:
    root = config["uid"] is not None
    if hasattr(libc, "prctl"):  # Linux
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans come here to be reaped, not to init
    if root and not sweep(config["uid"]):
        report(error=f"processes of sandbox uid {config['uid']} cannot be killed")
        return SETUP_FAILED
    signal.signal(signal.SIGTERM, stop)
    isolated = config["namespaces"] and unshare(root)
    report(namespaces=isolated, uid=root)
    if isolated:
        # init is reaped only after the kernel killed and reaped all else in its namespace
        return exit_code(wait_for(start(lambda: init(config, runner, code))))
    if root and (hidden := [p for p in config["reveal"] if inaccessible_ancestor(p)]):
        report(
            error=f"{hidden} cannot be entered by an unprivileged uid and mount namespaces "
            f"are refused here: install Python where others may read it"
        )
        return SETUP_FAILED
    if not root:  # RLIMIT_NPROC counts all of this user's processes: allow that many more
        config = {**config, "max_processes": config["max_processes"] + tasks_of(os.getuid())}
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    if root:
        os.chown(workdir, config["uid"], config["uid"])
    user = start(lambda: run_user(config, runner, code, workdir))
    code = exit_code(wait_for(user))
    if not root:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(user, signal.SIGKILL)  # what it left in its process group
    shutil.rmtree(workdir, ignore_errors=True)
    if root and not sweep(config["uid"]):
        report(error=f"processes of sandbox uid {config['uid']} survived the sweep")
    return code


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    if "sweep" in settings:
        sys.exit(0 if sweep(settings["sweep"]) else 1)
    sys.exit(main(settings, sys.argv[2], sys.argv[3]))
