"""The service's long calls, seen as they go: a `sample` of a large batch, a
`forward_backward` over many datums, a save or load of the weights. Each is a
`rlvr.runlog.progress.Timed`: nothing for a call shorter than `AFTER_S` (most calls of a
training script); past it, its elapsed time with an ETA from the rate of the same kind of
call earlier in this process (its units per second), a bar on a terminal and a line every
`EVERY_S` off one, and a closing line. Lines go to the service's stderr (a server's
console for the Tinker and PyTRIO fronts)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rlvr.runlog.progress import Timed

AFTER_S = 10.0
"""A call shorter than this prints nothing."""
EVERY_S = 30.0
"""Off a terminal, a long call's line comes this often."""
RATES: dict[str, float] = {}
"""Call kind → units per second of its last call in this process (the ETA's source)."""


@contextmanager
def long_call(kind: str, units: float, what: str, file=None) -> Iterator[Timed]:
    """Time the call `kind` of `units` (e.g. tokens), described by `what` ("64 × up to
    512 tokens"); its rate is kept for the next call of that kind."""
    rate = RATES.get(kind)
    expected = units / rate if rate and units > 0 else None
    started = time.perf_counter()
    timed = Timed(f"rlvr service {kind} ({what})", expected, AFTER_S, EVERY_S, file)
    with timed:
        yield timed
    seconds = time.perf_counter() - started
    if units > 0 and seconds > 0:
        RATES[kind] = units / seconds
