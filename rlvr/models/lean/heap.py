"""glibc malloc's say over whether freed memory goes back to the system: kept for reuse
(the trainer's setting on a CPU, `rlvr.train.allocation.keep_freed_pages`) or returned,
for the buffers allocated inside `returned_when_freed`.

A training step allocates and frees the same large buffers every time, so keeping freed
memory saves the page faults of faulting them in again at every step. A buffer that lives
through part of a step only, and is not the size of anything the rest of the step
allocates, is better returned: kept, its freed range is a hole that the step's other
buffers are cut from, page by page touching memory that had never been resident, and
the process's resident set grows from step to step. The decode loop's packed weights
(`rlvr.models.lean.packed`) are such buffers: MKL asks for three to nine times the bytes
it writes for its packed layout, and on SmolLM2-135M the whole set is 2.4 GB of address
space for 0.5 GB of memory touched. Kept, they took a 24-token full fine-tune's peak from
4.19 GiB at its first step to 4.59 at its third (3.97 unpacked; benchmarks/step_memory.py,
benchmarks/RESULTS.md).

Returning them is not enough: glibc serves a request from the heap's free chunks first
and maps only what does not fit there, so after the first update the packed copies were
cut partly from the kept heap, touching its never-written pages, and the resident set
grew 0.025-0.027 GiB a step, without end (a 24-token full
fine-tune's peak 4.19 GiB at its second step, 4.51 at its fourteenth). `release_kept`
hands the kept heap's free pages back before they are packed: the rollout then holds what
is live and the packed copies, the update faults back in the pages it uses, and the peak
is the update's, 3.80-4.08 GiB over fourteen steps with no trend
(`benchmarks/step_memory.py --steps 14`, benchmarks/RESULTS.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# mallopt's parameters (malloc.h) and glibc's defaults.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_MMAP_THRESHOLD = -3
KEPT = 2**31 - 1  # the largest free heap top glibc keeps (bytes): never trimmed by a step
MMAP_MAX = 65536  # glibc's default count of buffers from `mmap` at once
MMAP_THRESHOLD = 128 * 1024  # glibc's default size (bytes) from which `mmap` serves a buffer

_kept = False  # whether `keep_freed` has taken effect in this process


@functools.cache
def _glibc(name: str, *argtypes: type) -> Callable[..., int] | None:
    """glibc's function `name` (`mallopt`, `malloc_trim`) taking `argtypes`; None off Linux
    or without glibc (musl has neither)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    return fn


def _mallopt() -> Callable[[int, int], int] | None:
    return _glibc("mallopt", ctypes.c_int, ctypes.c_int)


def keep_freed() -> bool:
    """Keep freed memory for reuse, process-wide and for the rest of the process: no buffer
    from `mmap` (each is faulted in afresh and returned when freed) and no trimming of the
    heap's free top. Returns whether it took effect."""
    global _kept
    mallopt = _mallopt()
    if mallopt is None:
        return False
    _kept = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, KEPT))
    return _kept


def release_kept() -> bool:
    """Give the heap's free pages back to the system now (glibc's `malloc_trim(0)`, some
    40-60 ms on SmolLM2-135M's heap), where `keep_freed` keeps them; the next buffers cut
    from those ranges fault their pages in afresh. Returns whether anything was done."""
    trim = _glibc("malloc_trim", ctypes.c_size_t) if _kept else None
    if trim is None:
        return False
    trim(0)
    return True


@contextmanager
def returned_when_freed() -> Iterator[None]:
    """Buffers of 128 KB and more allocated inside come from `mmap`, as glibc's default
    has them, and go back to the system when freed, whatever `keep_freed` set; outside,
    `keep_freed`'s setting holds again. Nothing changes where `keep_freed` is not in
    effect. Process-wide while inside: another thread's large buffers are mapped too."""
    mallopt = _mallopt() if _kept else None
    if mallopt is None:
        yield
        return
    # The threshold too: glibc may have raised it (up to 32 MB) before `keep_freed`
    # fixed it, and with no buffer mapped outside this block its value matters only here.
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_MMAP_MAX, MMAP_MAX)
    try:
        yield
    finally:
        mallopt(M_MMAP_MAX, 0)
