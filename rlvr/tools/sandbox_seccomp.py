"""The system calls sandboxed code may not make: a seccomp filter, installed (after
`PR_SET_NO_NEW_PRIVS`) just before the code's interpreter is executed, and inherited by
every process it starts. Standard library only (the launcher imports it).

Refused with EPERM: new namespaces (`unshare`, `setns`, `clone` with a CLONE_NEW* flag), so
the code cannot make a user namespace of its own and mount there (security audit F4);
mounting and changing root; memory that is neither address space nor a file of its
bounded tmpfs (`memfd_create`, `memfd_secret`, SysV `shmget` and `msgget`: F5); and kernel
surfaces a computation never needs (`bpf`, `userfaultfd`, `perf_event_open`, `io_uring`,
the key rings). `clone3` gets ENOSYS, as from an older kernel: its flags sit in memory a
filter cannot read, and the C library then falls back to `clone`. A call of another ABI
(32-bit or x32 on x86-64) gets ENOSYS too.
"""

from __future__ import annotations

import ctypes
import errno
import platform

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH, ARG0 = 0, 4, 16
"""Offsets in `struct seccomp_data` (arg 0's low 32 bits: both ABIs are little-endian)."""
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
X32_BIT = 0x40000000

REFUSED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "memfd_create", "memfd_secret",
    "shmget", "msgget", "bpf", "userfaultfd", "perf_event_open", "io_uring_setup", "add_key",
    "request_key", "keyctl",
)  # fmt: skip
SYSCALLS = {
    "x86_64": (0xC000003E, {
        "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "memfd_create": 319, "memfd_secret": 447, "shmget": 29,
        "msgget": 68, "bpf": 321, "userfaultfd": 323, "perf_event_open": 298,
        "io_uring_setup": 425, "add_key": 248, "request_key": 249, "keyctl": 250,
    }),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186, "bpf": 280,
        "userfaultfd": 282, "perf_event_open": 241, "io_uring_setup": 425, "add_key": 217,
        "request_key": 218, "keyctl": 219,
    }),
}  # fmt: skip
"""Audit architecture and system call numbers (the kernel's unistd tables)."""


class _Instruction(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` (`platform.machine()`) as (code, jt, jf, k) instructions."""
    audit_arch, numbers = SYSCALLS[machine]
    ops: list[tuple] = [(LD_W_ABS, ARCH), (JEQ_K, audit_arch, None, "enosys"), (LD_W_ABS, NR)]
    if machine == "x86_64":
        ops.append((JGE_K, X32_BIT, "enosys", None))
    ops += [(JEQ_K, numbers["clone"], "clone", None), (JEQ_K, numbers["clone3"], "enosys", None)]
    ops += [(JEQ_K, numbers[name], "eperm", None) for name in REFUSED]
    ops += [(RET_K, RET_ALLOW), "clone", (LD_W_ABS, ARG0), (JSET_K, NAMESPACE_FLAGS, "eperm", None)]
    ops += [(RET_K, RET_ALLOW), "eperm", (RET_K, RET_ERRNO | errno.EPERM)]
    ops += ["enosys", (RET_K, RET_ERRNO | errno.ENOSYS)]
    return _assemble(ops)


def _assemble(ops: list) -> list[tuple[int, int, int, int]]:
    """Resolve the labels (strings) of jumps to offsets; None: the next instruction."""
    labels, index = {}, 0
    for op in ops:
        if isinstance(op, str):
            labels[op] = index
        else:
            index += 1
    code, index = [], 0
    for op in ops:
        if isinstance(op, str):
            continue
        if len(op) == 2:
            code.append((op[0], 0, 0, op[1]))
        else:
            jt, jf = (0 if t is None else labels[t] - index - 1 for t in op[2:])
            code.append((op[0], jt, jf, op[1]))
        index += 1
    return code


def install() -> dict[str, bool]:
    """Set PR_SET_NO_NEW_PRIVS on this process (setuid binaries then run without their
    privileges) and the filter; what took effect (no filter on an unknown machine)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return {"no_new_privs": False, "seccomp": False}
    if platform.machine() not in SYSCALLS:
        return {"no_new_privs": True, "seccomp": False}
    code = program(platform.machine())
    instructions = (_Instruction * len(code))(*(_Instruction(*op) for op in code))
    prog = _Program(len(code), instructions)
    done = libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0
    return {"no_new_privs": True, "seccomp": done}
