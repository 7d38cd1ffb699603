"""Helpers of the hostile-program suite: run code in the python sandbox, on the path a root
trainer takes or on the one a non-root trainer takes, and find what a call left behind."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from rlvr.tools import SandboxLimits, python_sandbox, run_python
from rlvr.tools.python_sandbox import UID_COUNT, observation
from rlvr.tools.sandbox_procfs import status_of

ROOT = Path(__file__).resolve().parents[2]
FIRST, LAST = SandboxLimits().first_uid, SandboxLimits().first_uid + UID_COUNT
SYSTEM_PYTHON = Path("/usr/bin/python3")

as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sandbox's uids, mounts and namespaces need a root trainer"
)


def run(code: str, **limits) -> tuple[str, python_sandbox.SandboxResult]:
    """The observation and the result of one call. 20 s of wall clock unless told: code
    that ends by itself needs well under 1 s alone, and the CPU is shared."""
    chosen = SandboxLimits(**{"timeout_s": 20, **limits})
    result = run_python(code, chosen)
    return observation(result, chosen), result


def sandbox_processes() -> list[str]:
    """'pid uid state' of every process running as a sandbox uid (zombies too)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        status = status_of(name)
        with contextlib.suppress(TypeError, KeyError, IndexError, ValueError):
            uid = int(status["Uid"][0])
            if FIRST <= uid < LAST:
                found.append(f"{name} {uid} {status['State'][0]}")
    return found


def wait_until_none_left(limit_s: float = 30) -> list[str]:
    """The sandbox processes still there after up to `limit_s`: a call another pytest worker
    is making meanwhile ends within its own limit (20 s at most here)."""
    deadline = time.monotonic() + limit_s
    while (left := sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@contextlib.contextmanager
def as_a_non_root_trainer(monkeypatch):
    """The path a non-root trainer takes: no uid of its own, the namespaces inside a user
    namespace (simulated as root, whose uid is mapped to 1000 inside)."""

    @contextlib.contextmanager
    def no_uid(first_uid, settled):
        yield None

    with monkeypatch.context() as patch:
        patch.setattr(python_sandbox, "sandbox_uid", no_uid)
        patch.setattr(python_sandbox, "_warn_once", lambda enforced: None)  # expected gaps
        yield


@contextlib.contextmanager
def without_namespaces(monkeypatch):
    """The fallback, as where the kernel refuses namespaces: the code runs as its uid only,
    with an interpreter others may enter (the system's)."""
    if not SYSTEM_PYTHON.exists() or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("no system python to run without namespaces")
    original = python_sandbox._config
    with monkeypatch.context() as patch:
        patch.setattr(
            python_sandbox,
            "_config",
            lambda limits, uid: {
                **original(limits, uid),
                "namespaces": False,
                "python": str(SYSTEM_PYTHON),
                "reveal": ["/usr"],
            },
        )
        patch.setattr(python_sandbox, "_warn_once", lambda enforced: None)
        yield
