"""Stopping a run on request: SIGINT/SIGTERM finish the step; the run then checkpoints
and raises `RunInterrupted`, which the command line turns into one line and exit 130."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any


class RunInterrupted(Exception):
    """SIGINT/SIGTERM stopped the run; `checkpoint` (or None) is where to resume from."""

    def __init__(self, out: Path, step: int, checkpoint: Path | None) -> None:
        """`step`: the step `checkpoint` holds, where a resumed run continues from."""
        self.out, self.step, self.checkpoint = out, step, checkpoint
        if checkpoint is None:
            text = "interrupted before the first checkpoint; a resumed run starts at step 0"
        else:
            text = f"interrupted; checkpoint {checkpoint} holds step {step}"
        super().__init__(text)

    def __reduce__(self):  # crosses process boundaries in `rlvr compare --jobs N`
        return (RunInterrupted, (self.out, self.step, self.checkpoint))


class RunDiverged(Exception):
    """Non-finite losses, gradients or weights: the run stopped; the message says where
    the last good checkpoint is."""


class StopRequest:
    """SIGINT/SIGTERM set `requested`; the run stops after the current step. A second
    signal abandons the step (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            f"rlvr: {signal.Signals(signum).name} received: finishing the step, then "
            f"checkpointing (signal again to abandon the step)",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
