"""The benchmarks' peak memory is the contestant's own: a process that a bigger one started
(fork, then exec, as the benchmark's driver starts its contestants) must not report the
parent's peak, which Linux's ru_maxrss carries across execve."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
PARENT = """
import os, sys
ballast = bytearray(600 * 2**20)
ballast[:: 4096] = b"1" * len(ballast[:: 4096])  # touched: 600 MiB resident
os.execv(sys.executable, [sys.executable, "-c", CHILD])
"""
CHILD = """
import resource, sys
sys.path.insert(0, BENCH)
import harness
print(harness.peak_resident_bytes() // 2**20, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_process_started_by_a_bigger_one_reports_its_own_peak():
    child = f"BENCH = {str(BENCH)!r}\n" + CHILD
    out = subprocess.run(
        [sys.executable, "-c", f"CHILD = {child!r}\n" + PARENT],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    own, inherited = int(out[0]), int(out[1])
    assert inherited >= 600  # ru_maxrss: the parent's ballast, though the child never held it
    assert own < 500  # VmHWM: an interpreter with torch-free imports holds far less
