"""glibc malloc's kept and returned memory (rlvr/models/lean/heap.py), each case in a fresh
process: the setting is process-wide and lasts for the rest of the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

ROOT = str(Path(__file__).resolve().parents[2])

RESIDENT = """
import sys, torch
sys.path.insert(0, {root!r})
from rlvr.models.lean.heap import keep_freed, release_kept, returned_when_freed
def resident_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
kept = keep_freed() if {keep} else False
base = resident_mib()
def held_after_free(returned):
    if returned:
        with returned_when_freed():
            buffer = torch.ones(64 * 2**20 // 4)  # 64 MiB, every page written
    else:
        buffer = torch.ones(64 * 2**20 // 4)
    del buffer
    return resident_mib() - base
print(kept, held_after_free({returned}))
"""


def _held_mib(keep: bool, returned: bool) -> tuple[str, float]:
    script = textwrap.dedent(RESIDENT.format(root=ROOT, keep=keep, returned=returned))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    return out[0], float(out[1])


def test_kept_memory_stays_resident_after_a_free():
    """With freed memory kept, a freed 64 MiB buffer's pages stay with the process."""
    kept, held = _held_mib(keep=True, returned=False)
    assert kept == "True"
    assert held > 48


def test_a_buffer_allocated_inside_the_block_goes_back_when_freed():
    """The same buffer allocated inside `returned_when_freed` is mapped, and unmapped when
    freed, although freed memory is otherwise kept: its pages leave the resident set."""
    kept, held = _held_mib(keep=True, returned=True)
    assert kept == "True"
    assert held < 16


def test_the_block_changes_nothing_where_memory_is_not_kept():
    """Without `keep_freed` glibc's default maps the buffer anyway, and the block leaves
    that default as it was (returned either way)."""
    for returned in (False, True):
        kept, held = _held_mib(keep=False, returned=returned)
        assert kept == "False"
        assert held < 16


def test_kept_memory_stays_kept_after_the_block():
    """After the block, a large buffer is kept again: `keep_freed`'s setting is restored."""
    script = textwrap.dedent(
        RESIDENT.format(root=ROOT, keep=True, returned=True) + "print(held_after_free(False))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[0] == "True" and float(out[1]) < 16  # inside: returned
    assert float(out[2]) > 48  # after: kept


def test_release_kept_hands_the_kept_pages_back():
    """A freed buffer's pages, kept by `keep_freed`, leave the resident set when
    `release_kept` is called; where nothing is kept it does nothing and says so."""
    script = textwrap.dedent(
        RESIDENT.format(root=ROOT, keep=True, returned=False)
        + "print(release_kept(), resident_mib() - base)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[0] == "True" and float(out[1]) > 48  # freed, kept
    assert out[2] == "True" and float(out[3]) < 16  # released
    script = textwrap.dedent(
        RESIDENT.format(root=ROOT, keep=False, returned=False) + "print(release_kept())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[0] == "False" and out[2] == "False"
