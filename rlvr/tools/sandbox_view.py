"""The python sandbox's file system: a new root made of an allowlist, entered with
`pivot_root`. Standard library only (the launcher, `python -I -S`, imports it).

Run by the namespace's init (root, or root of a user namespace) in its new mount namespace,
`build_view` makes a small tmpfs the new root and shows in it only what the code needs:

- read-only, with `nosuid,nodev` on every mount: SYSTEM (`/usr`, `/bin`, `/lib*`, the
  dynamic linker's cache and configuration, the time zone) and the interpreter's prefixes
  (`config["reveal"]`; the virtual environment's installed packages with them);
- the device nodes DEVICES (`nosuid`, read-only; not `nodev`, being devices);
- an `/etc/passwd` and `/etc/group` that name root and the sandbox's user only;
- one fresh tmpfs of `disk_mb`, shared by `/tmp` (its working directory `/tmp/work`) and
  `/dev/shm`: the only place it may write, bounded as a whole;
- `/proc` of its own PID namespace.

Nothing else of the host is there: no project checkout, data set or answers, no home
directory, no `/run`, `/var`, `/sys`, and so no unix socket of the host (security audit F6,
F7); no setuid binary gains privileges (F3). The old root is detached once entered.
"""

from __future__ import annotations

import ctypes
import os
import re

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MNT_DETACH = 1 << 18, 1 << 21, 2
OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}
SYSTEM = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
)  # fmt: skip
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEV_LINKS = {"fd": "/proc/self/fd", **{n: f"/proc/self/fd/{i}" for i, n in enumerate(("stdin", "stdout", "stderr"))}}  # fmt: skip
NEW_ROOT = "/tmp"
"""Where the new root is built: the host's /tmp, covered (what lies under it, such as a
virtual environment in a clone there, is still reached through a descriptor)."""
WORKDIR = "/tmp/work"

libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype, flags, data=None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


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


def build_view(config: dict, user: int) -> dict:
    """Build the new root (module docstring) and enter it; `user` is the uid the code will
    run as. What was enforced, for the launcher's report."""
    os.umask(0o022)
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    host_tmp = os.open("/tmp", os.O_PATH)
    try:
        mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        scratch(NEW_ROOT, config["disk_mb"])
        shown: list[str] = []
        for path in [*SYSTEM, *config["reveal"]]:
            if not any(path == s or path.startswith(s.rstrip("/") + "/") for s in shown):
                show(_host(path, host_tmp), NEW_ROOT + path, MS_NODEV)
                shown.append(path)
        for path in DEVICES:
            show(path, NEW_ROOT + path, 0)
        for name, target in DEV_LINKS.items():
            os.symlink(target, f"{NEW_ROOT}/dev/{name}")
        users(NEW_ROOT, user)
        own_proc = proc(NEW_ROOT)
    finally:
        os.close(host_tmp)
    enter(NEW_ROOT)
    os.mkdir(WORKDIR, 0o700)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return {"read_only_root": True, "own_proc": own_proc, "allowlisted_root": True}


def _host(path: str, host_tmp: int) -> str:
    """Where the host's `path` is reached once NEW_ROOT covers the host's /tmp."""
    if path.startswith("/tmp/"):
        return f"/proc/self/fd/{host_tmp}/{path[len('/tmp/') :]}"
    return path


def scratch(root: str, disk_mb: int) -> None:
    """One tmpfs of `disk_mb` seen as `/tmp` and as `/dev/shm` (two directories of it), so
    the two together hold at most `disk_mb`."""
    stage = f"{root}/.scratch"
    os.mkdir(stage)
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=755")
    for name, target in (("tmp", f"{root}/tmp"), ("shm", f"{root}/dev/shm")):
        os.mkdir(f"{stage}/{name}")
        os.chmod(f"{stage}/{name}", 0o1777)
        os.makedirs(target)
        mount(f"{stage}/{name}", target, None, MS_BIND)
    libc.umount2(stage.encode(), MNT_DETACH)
    os.rmdir(stage)


def show(source: str, target: str, flags: int) -> None:
    """Bind `source` at `target`, every mount of it read-only, `nosuid` and `flags`; a
    symbolic link is copied as one; a missing source is left out."""
    if os.path.islink(source):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(source), target)
        return
    if not os.path.exists(source):
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    mount(source, target, None, MS_BIND | MS_REC)
    for point, keep in mounts():
        if point == target or point.startswith(target + "/"):
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags | keep)


def users(root: str, user: int) -> None:
    os.makedirs(f"{root}/etc", exist_ok=True)
    with open(f"{root}/etc/passwd", "w") as f:
        f.write(f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{user}:{user}::{WORKDIR}:/usr/sbin/nologin\n")  # fmt: skip
    with open(f"{root}/etc/group", "w") as f:
        f.write(f"root:x:0:\nsandbox:x:{user}:\n")


def proc(root: str) -> bool:
    """/proc of the new PID namespace; False where the kernel refuses (then there is none)."""
    os.makedirs(f"{root}/proc")
    try:
        mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        return False
    return True


def enter(root: str) -> None:
    """Make `root` the root and detach the old one (pivot_root(2)'s "." "." idiom)."""
    os.chdir(root)
    if libc.pivot_root(b".", b".") != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"pivot_root {root}: {os.strerror(error)}")
    if libc.umount2(b".", MNT_DETACH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"detaching the old root: {os.strerror(error)}")
    os.chdir("/")
