"""The python sandbox's launcher: a trusted script, run as `python -I -S sandbox_launcher.py
CONFIG RUNNER CODE` by `rlvr.tools.python_sandbox`, that builds the sandbox and runs the
code in it. Standard library only; it never imports rlvr, only the sandbox_* modules beside
it (procfs, view, seccomp, cgroup).

As root: a private mount, PID, network and IPC namespace (ctypes `unshare`), whose root is
built from an allowlist (`sandbox_view`: the interpreter and its packages, read-only,
nosuid, nodev; one small tmpfs for /tmp and /dev/shm; /proc of the sandbox only). The code
runs as a dedicated uid (`CONFIG["uid"]`), so RLIMIT_NPROC binds and nothing outside /tmp
is writable; every process of that uid is killed before and after (`sweep`).
Not root: the same namespaces inside an unprivileged user namespace where the kernel
allows one; else only the resource limits and the process group.
Every path: the code's process has PR_SET_NO_NEW_PRIVS and a seccomp filter
(`sandbox_seccomp`: no namespaces of its own, no mounts, no memfd or SysV shared memory),
and, where the host lets the launcher make one, a memory cgroup for the whole call
(`sandbox_cgroup`).

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
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
import sandbox_cgroup
from sandbox_procfs import processes_of, tasks_of
from sandbox_seccomp import install as install_seccomp
from sandbox_view import WORKDIR, build_view

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
INNER_UID = 1000
"""The user's uid inside an unprivileged user namespace (not 0: exec then drops the
namespace's capabilities, so the code cannot undo the mounts)."""
SETUP_FAILED = 125

libc = ctypes.CDLL(None, use_errno=True)


def report(**fields) -> None:
    os.write(2, (json.dumps(fields) + "\n").encode())


def sweep(uid: int, limit_s: float = 5.0, zombies_s: float = 1.0) -> bool:
    """Kill every process of `uid`: a helper of that uid sends kill(-1, SIGKILL) (every
    process it may signal, at once: a fork racing it either is killed too or fails), again
    while /proc shows one alive, then waits up to `zombies_s` for their parents to reap
    them; orphans reparented here are reaped meanwhile. True when none is left alive
    (zombies whose parent does not reap them, an init outside, are not alive).

    The first kill is sent whatever /proc shows: a daemon that keeps re-forking lives at a
    pid newer than the listing of /proc, which then shows only its zombies (audit F10)."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            deadline, only_zombies = time.monotonic() + limit_s, None
            os.kill(-1, signal.SIGKILL)  # succeeds even when it may signal none
            while (found := processes_of(uid)) and time.monotonic() < deadline:
                if any(state != "Z" for state in found.values()):
                    os.kill(-1, signal.SIGKILL)
                    only_zombies = None
                elif (
                    time.monotonic() - (only_zombies := only_zombies or time.monotonic())
                    > zombies_s
                ):
                    break
                time.sleep(0.005)
            alive = any(state != "Z" for state in processes_of(uid).values())
            os._exit(1 if alive else 0)
        finally:
            os._exit(1)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == helper:
            return os.waitstatus_to_exitcode(status) == 0


def unshare(root: bool) -> bool:
    """New PID, network and IPC namespaces (and, not root, a user namespace in which this
    user is INNER_UID); False where the kernel refuses. The mount namespace is init's
    alone: its pivot_root would move the root of every process of its namespace, this
    launcher's too, which must still see the host's cgroups."""
    flags = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
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


def inaccessible_ancestor(path: str) -> str | None:
    """The outermost directory on the way to `path` that others may not enter."""
    here = "/"
    for part in path.strip("/").split("/"):
        here = os.path.join(here, part)
        if os.path.isdir(here) and not os.stat(here).st_mode & 0o001:
            return here
    return None


def set_limits(config: dict) -> None:
    mb = 1024 * 1024
    limits = {
        resource.RLIMIT_AS: config["memory_mb"] * mb,
        resource.RLIMIT_FSIZE: config["file_size_mb"] * mb,
        resource.RLIMIT_NOFILE: config["max_open_files"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NPROC: config["max_processes"],
        resource.RLIMIT_MSGQUEUE: 0,  # POSIX message queues: memory outside RLIMIT_AS
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
        if config.get("cgroup_procs") is not None:
            sandbox_cgroup.join(config["cgroup_procs"])
        os.chdir(workdir)
        set_limits(config)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(1, 2)
        if config["uid"] is not None:
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
        os.write(errors, (json.dumps(install_seccomp()) + "\n").encode())
        python = config["python"]
        flags = ["-I", "-u", "-X", "utf8"] + ([] if config["site_packages"] else ["-S"])
        argv = [python, *flags, "-c", runner, code, str(config["memory_mb"])]
        os.execve(python, argv, {**config["env"], "HOME": workdir, "TMPDIR": workdir})
    except BaseException as error:
        os.write(errors, (json.dumps({"error": f"starting python: {error}"}) + "\n").encode())
    return SETUP_FAILED


def wait_for(pid: int) -> int:
    """Reap children (orphans too) until `pid` exits; its exit code (−signal if killed).
    A child leaves STARTED before it is reaped, with SIGTERM held: `stop` never signals a
    pid that was reaped, and so may be another process's by now (audit F10)."""
    while True:
        done = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT).si_pid  # a zombie still
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            with contextlib.suppress(ValueError):
                STARTED.remove(done)
            _, status = os.waitpid(done, 0)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        if done == pid:
            return os.waitstatus_to_exitcode(status)


def init(config: dict, runner: str, code: str) -> int:
    """PID 1 of the sandbox's namespace: its exit kills every process left in it."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: so is the namespace
    try:
        if libc.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) refused")
        view = build_view(config, INNER_UID if config["uid"] is None else config["uid"])
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
    cgroup = sandbox_cgroup.make((config["memory_mb"] + config["disk_mb"]) << 20)
    report(memory_cgroup=cgroup is not None)
    if cgroup is None:
        return contain(config, runner, code)
    procs = sandbox_cgroup.opener(cgroup)
    try:
        return contain({**config, "cgroup_procs": procs}, runner, code)
    finally:
        os.close(procs)
        if kills := sandbox_cgroup.oom_kills(cgroup):
            report(oom_kills=kills)
        sandbox_cgroup.remove(cgroup)


def contain(config: dict, runner: str, code: str) -> int:
    """Run the code as isolated as the kernel allows (module docstring); its exit code."""
    root = config["uid"] is not None
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
    if root and not (sweep(config["uid"]) or sweep(config["uid"])):
        report(error=f"processes of sandbox uid {config['uid']} survived the sweep")
    reap_orphans()
    return code


def reap_orphans(limit_s: float = 1.0) -> None:
    """Reap the zombies reparented here (a subreaper), which would otherwise pass to an
    init that may be slow to reap them, still counting against the uid's RLIMIT_NPROC."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    if "sweep" in settings:
        sys.exit(0 if sweep(settings["sweep"]) else 1)
    sys.exit(main(settings, sys.argv[2], sys.argv[3]))
