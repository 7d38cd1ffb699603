"""What the side-by-side benchmarks share: a contestant in a process of its own, driven
one request at a time over a pipe (so that the machine's drifting speed hits every
contestant alike), and the peak memory a process has used."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
from collections.abc import Callable, Iterable
from contextlib import contextmanager

import torch


class Contestant:
    """The driver's end of one contestant's process: it answers each line it reads with
    one JSON line, and may answer once more at the end of its input."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def receive(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(
                f"contestant {self.name!r} exited with code {code} before answering "
                "(its stderr is above)"
            )
        return json.loads(line)

    def step(self) -> dict:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return self.receive()

    def finish(self) -> dict:
        """Close its input and return what it answers at the end of input."""
        self.proc.stdin.close()
        return self.receive()

    def close(self, abort: bool) -> None:
        """Close its input (it exits at the end of input); on `abort`, also SIGTERM it.
        SIGKILL whatever is still running after the grace period."""
        if abort:
            self.proc.terminate()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10 if abort else 120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def contestants(names: Iterable[str], argv: Callable[[str], list[str]]):
    """One process per contestant (`argv(name)`), all ended on the way out, whatever
    happened."""
    procs: dict[str, Contestant] = {}
    abort = True
    try:
        for name in names:
            procs[name] = Contestant(name, argv(name))
        yield procs
        abort = False
    finally:
        for proc in procs.values():
            proc.close(abort)


def peak_bytes() -> int:
    """This process's peak memory so far: the GPU's peak allocation when there is a GPU,
    else the peak resident set (Linux reports KiB)."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    return peak_resident_bytes()


def peak_resident_bytes() -> int:
    """This process's own peak resident set: /proc's VmHWM, which starts again at `exec`.
    `getrusage`'s ru_maxrss does not: Linux keeps it across `execve`, so a contestant
    started by a driver that had peaked higher would report the driver's peak. Elsewhere
    (no /proc), ru_maxrss (KiB on Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
