"""The `python` tool: run untrusted code in a fresh sandboxed process, return what it printed.

Each call starts `sandbox_launcher.py` (the isolation: namespaces, read-only file system, a
dedicated uid when root, resource limits; see its docstring and docs/agentic.md, "The
python sandbox: guarantees and limits") and reads the code's output here, capped, under a
wall-clock limit after which the whole sandbox is killed. The observation is the output
(head and tail kept, the cut counted), a line for a time-out, a kill or a non-zero exit,
with special tokens of chat templates broken (`special_tokens.neutralise`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from rlvr.tools.sandbox_procfs import processes_of
from rlvr.tools.sandbox_uids import UID_COUNT, SandboxError, sandbox_uid  # both still here
from rlvr.tools.special_tokens import neutralise

HERE = Path(__file__).resolve().parent
LAUNCHER = str(HERE / "sandbox_launcher.py")
RUNNER = (HERE / "sandbox_runner.py").read_text()
MAX_CODE_BYTES = 100_000
"""Longer code is refused (it travels as one argument; Linux takes 128 KiB)."""
MAX_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0
"""How long a launcher asked to stop may take to kill and reap its sandbox."""
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The code's whole environment (HOME and TMPDIR: its working directory); nothing of the
trainer's."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one call may use. Memory, CPU time, file size and open files are per process."""

    timeout_s: float = 4.0
    """Wall-clock limit (≤ 30 s); then every process of the call is killed. Keep it below
    ToolEnvironment.timeout_s (5 s) so the sandbox's own limit is the one that fires."""
    memory_mb: int = 512
    """Address space (RLIMIT_AS) of each process; with a memory cgroup (a root trainer,
    where the host allows one), all the call's processes together hold at most
    memory_mb + disk_mb (its tmpfs's pages count)."""
    cpu_s: int | None = None
    """CPU seconds of each process (RLIMIT_CPU; then SIGXCPU); None: ⌈timeout_s⌉."""
    file_size_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE)."""
    disk_mb: int = 64
    """Size of the sandbox's private /tmp and /dev/shm together, where it may write."""
    max_processes: int = 16
    """Processes and threads of the sandbox together (RLIMIT_NPROC of its own uid)."""
    max_open_files: int = 64
    output_chars: int = 2000
    """Characters of output in the observation; beyond, head and tail are kept."""
    max_output_bytes: int = 1_000_000
    """Output read at most; a program printing more is stopped."""
    site_packages: bool = True
    """Installed packages (numpy, sympy) importable; False: the standard library only."""
    first_uid: int = 2_000_000_000
    """First of the UID_COUNT host uids the code runs as when the trainer is root."""
    extra_tokens: tuple[str, ...] = field(default=())
    """Strings broken in the output besides COMMON_TOKENS: the run tokenizer's
    (`special_tokens.tokenizer_tokens`)."""

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {self.timeout_s!r}")
        for name in ("memory_mb", "file_size_mb", "disk_mb", "max_processes", "max_open_files"):
            _positive_int(name, getattr(self, name))
        for name in ("output_chars", "max_output_bytes", "first_uid"):
            _positive_int(name, getattr(self, name))
        if self.cpu_s is not None:
            _positive_int("cpu_s", self.cpu_s)
        if self.max_open_files < 16:
            raise ValueError(
                f"max_open_files must be ≥ 16 (python needs some), got {self.max_open_files}"
            )
        if self.first_uid + UID_COUNT > 2**32 - 2:
            raise ValueError(f"first_uid + {UID_COUNT} must be < 2**32 - 2, got {self.first_uid}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"SandboxLimits.{name} must be a positive integer, got {value!r}")


@dataclass
class SandboxResult:
    output: str
    """stdout and stderr, interleaved, as the program wrote them (read up to the cap)."""
    exit_code: int | None
    """The program's exit code; 128 + N when signal N killed it; None when we stopped it."""
    timed_out: bool = False
    output_exceeded: bool = False
    enforced: dict = field(default_factory=dict)
    """What the launcher set up: namespaces, uid, read_only_root, own_proc."""
    seconds: float = 0.0


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` in a fresh sandbox; the output and how it ended. Raises SandboxError only
    when the sandbox could not be built.

    A SIGALRM (an enclosing time limit) is held until everything of the call is killed,
    then delivered: the clean-up cannot be interrupted halfway."""
    if why := _unpassable(code):
        return SandboxResult(f"error: the code {why}; it was not run", exit_code=None)
    masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        with sandbox_uid(limits.first_uid, _settled) as uid:
            return _run(code, limits, uid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, masked)


def _unpassable(code: str) -> str | None:
    """Why `code` cannot travel as the interpreter's argument, if it cannot: a null byte,
    a lone surrogate (no UTF-8 for it), or more than MAX_CODE_BYTES."""
    if "\0" in code:
        return "contains a null byte"
    try:
        size = len(code.encode())
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate (U+{ord(code[error.start]):04X}), which is not text"
    return f"is over {MAX_CODE_BYTES} bytes" if size > MAX_CODE_BYTES else None


def _run(code: str, limits: SandboxLimits, uid: int | None) -> SandboxResult:
    started = time.monotonic()
    command = [sys.executable, "-I", "-S", LAUNCHER, json.dumps(_config(limits, uid)), RUNNER]
    process = subprocess.Popen(
        [*command, code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(ENV),
        start_new_session=True,
    )
    try:
        output, reports, stopped = _collect(process, started + limits.timeout_s, limits)
    finally:
        _stop(process, uid)
        if uid is not None and _alive(uid):  # whatever the launcher's path missed
            _sweep(uid)
    enforced = _parse_reports(reports)
    _warn_once(enforced)
    return SandboxResult(
        output=output.decode("utf-8", errors="replace"),
        exit_code=None if stopped else process.returncode,
        timed_out=stopped == "timeout",
        output_exceeded=stopped == "output",
        enforced=enforced,
        seconds=time.monotonic() - started,
    )


def _config(limits: SandboxLimits, uid: int | None) -> dict:
    cpu_s = limits.cpu_s or math.ceil(limits.timeout_s)
    needed = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    keys = ("memory_mb", "file_size_mb", "disk_mb", "max_processes", "max_open_files")
    return {
        **{k: getattr(limits, k) for k in keys},
        "cpu_s": cpu_s,
        "uid": uid,
        "python": sys.executable,
        "site_packages": limits.site_packages,
        "reveal": sorted(os.path.realpath(p) for p in needed),
        "namespaces": True,  # False: as where the kernel refuses them (tests)
        "env": ENV,
    }


def _collect(
    process: subprocess.Popen, deadline: float, limits: SandboxLimits
) -> tuple[bytes, bytes, str | None]:
    """The program's output and the launcher's reports, read until both end, the deadline
    passes ("timeout") or the output passes its cap ("output")."""
    chunks = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    output, reports = chunks.values()
    open_fds = set(chunks)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(output), bytes(reports), "timeout"
        for fd in select.select(list(open_fds), [], [], left)[0]:
            chunk = os.read(fd, 65536)
            chunks[fd] += chunk
            if not chunk:
                open_fds.discard(fd)
        if len(output) > limits.max_output_bytes or len(reports) > 65536:
            return bytes(output[: limits.max_output_bytes]), bytes(reports[:65536]), "output"
    return bytes(output), bytes(reports), None


def _stop(process: subprocess.Popen, uid: int | None) -> None:
    """Ask a launcher still running to kill its sandbox and return (SIGTERM); should it not
    within STOP_GRACE_S, kill its process group and sweep the uid from here."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and the namespace's init
        process.wait()
        if uid is not None:
            _sweep(uid)
    finally:
        process.stdout.close()
        process.stderr.close()


def _alive(uid: int) -> bool:
    """Whether a process of `uid`, not a zombie, is left: the uid is released (its lock
    dropped) only empty, whichever way the launcher ended."""
    return any(state != "Z" for state in processes_of(uid).values())


def _settled(uid: int) -> bool:
    """Whether no process of `uid` is left alive, after one more sweep if one is: its lock
    is released only then (`sandbox_uid`)."""
    if _alive(uid):
        _sweep(uid)
    return not _alive(uid)


def _sweep(uid: int) -> None:
    sweeper = [sys.executable, "-I", "-S", LAUNCHER, json.dumps({"sweep": uid})]
    if subprocess.run(sweeper, env=dict(ENV), timeout=30).returncode != 0:
        raise SandboxError(f"processes of sandbox uid {uid} survived the kill")


def _parse_reports(reports: bytes) -> dict:
    enforced = {}
    for line in reports.decode("utf-8", errors="replace").splitlines():
        try:
            enforced.update(json.loads(line))
        except json.JSONDecodeError:
            raise SandboxError(f"the sandbox launcher failed: {reports.decode()[-2000:]}") from None
    if "error" in enforced:
        raise SandboxError(f"the sandbox could not run the code: {enforced['error']}")
    return enforced


_warned: set[tuple[str, ...]] = set()


NOT_ENFORCED = {
    "namespaces": "no namespaces: the network is reachable, the host's files are visible and "
    "writable where the user may write, other processes are visible",
    "uid": "not root: the code runs as the trainer's user",
    "read_only_root": "the file system could not be made read-only",
    "seccomp": "no seccomp filter: the code may create namespaces of its own and memory "
    "outside its limits",
    "memory_cgroup": "no memory cgroup: memory_mb bounds each process, not all of a call's "
    "processes together",
}


def _warn_once(enforced: dict) -> None:
    missing = tuple(k for k in NOT_ENFORCED if not enforced.get(k, False))
    if missing and missing not in _warned:
        _warned.add(missing)
        why = "; ".join(NOT_ENFORCED[k] for k in missing)
        warnings.warn(
            f"python sandbox: {why} (docs/agentic.md, 'The python sandbox: guarantees and limits')",
            RuntimeWarning,
            stacklevel=4,
        )


def observation(result: SandboxResult, limits: SandboxLimits) -> str:
    """What the policy reads: the output (head and tail kept when long) and how it ended."""
    text, n = result.output, limits.output_chars
    if len(text) > n:
        head, tail = text[: n // 2], text[len(text) - (n - n // 2) :]
        text = f"{head}\n[... {len(result.output) - n} characters cut ...]\n{tail}"
    lines = [text.rstrip("\n")] if text.strip() else []
    if result.timed_out:
        lines.append(f"[timed out after {limits.timeout_s:g} s: the program was stopped]")
    elif result.output_exceeded:
        lines.append(f"[stopped: the program printed more than {limits.max_output_bytes} bytes]")
    elif result.exit_code:
        lines.append(_exit_line(result.exit_code, limits, result.enforced.get("oom_kills", 0)))
    return neutralise("\n".join(lines), limits.extra_tokens)


def _exit_line(code: int, limits: SandboxLimits, oom_kills: int = 0) -> str:
    if code <= 128:
        return f"[exit code {code}]"
    name = signal.Signals(code - 128).name if code - 128 in signal.valid_signals() else code
    if name == "SIGXCPU":
        return (
            f"[killed: over its CPU time limit of {limits.cpu_s or math.ceil(limits.timeout_s)} s]"
        )
    if name == "SIGKILL" and oom_kills:
        total = limits.memory_mb + limits.disk_mb
        return f"[killed: its processes together went over their memory limit of {total} MB]"
    return f"[killed by {name}]"


def make_python_tool(**limits: object) -> Callable[[str], str]:
    """The `python` tool with other limits, e.g. `make_python_tool(timeout_s=2)`; keyword
    arguments are SandboxLimits' fields (extra_tokens: any iterable of strings)."""
    known = {f.name for f in fields(SandboxLimits)}
    unknown = sorted(set(limits) - known)
    if unknown:
        raise ValueError(f"unknown sandbox limits {unknown}; valid: {sorted(known)}")
    if "extra_tokens" in limits:
        limits["extra_tokens"] = tuple(limits["extra_tokens"])  # type: ignore[arg-type]
    chosen = SandboxLimits(**limits)  # type: ignore[arg-type]

    def python(code: str) -> str:
        return observation(run_python(code, chosen), chosen)

    python.__doc__ = PYTHON_DOC
    python.limits = chosen  # type: ignore[attr-defined]
    return python


PYTHON_DOC = """Run Python code and return what it printed (stdout and stderr); the value of a final bare expression is printed too, as in a notebook cell.

Each call is a fresh process: nothing is kept between calls. There is no network; the
working directory is a private temporary one; time, memory and output are limited.

Args:
    code: the Python source to run."""


python = make_python_tool()
"""The tool with the default limits: `tools: [rlvr.tools:python]`."""
