"""The outcome of checking one completion, and a wrapper that turns failures into outcomes.

A verifier sees hostile text; whatever goes wrong inside it (an exception, a
pathological input that runs too long) must become a ``Verdict`` that scores the
completion as wrong, never an exception that stops a training run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlvr.verify.timeout import VerifierTimeout, alarm_usable, with_alarm

DEFAULT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Verdict:
    """What a verifier concluded about one completion."""

    correct: bool
    """The extracted answer matches the reference."""
    formatted: bool
    """An answer could be extracted in the format the task asks for."""
    extracted: str | None
    """The extracted answer text, or None when nothing could be extracted."""
    reason: str = ""
    """A short human-readable explanation, e.g. ``"expected 122, got 121"``."""


def safe_verify(
    fn: Callable[..., Verdict], *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Verdict:
    """``fn(*args)``, or a failed Verdict if it raises, runs past ``timeout_s`` or returns junk.

    The time limit uses ``signal.setitimer`` and so applies only in the main thread
    on POSIX; elsewhere ``fn`` runs without one (size limits still bound the work).
    A single long C-level operation (a huge ``int`` power) cannot be interrupted by a
    signal, which is why parsers here bound their inputs rather than rely on time.
    """
    try:
        timed = timeout_s > 0 and alarm_usable()
        result = with_alarm(fn, args, timeout_s) if timed else fn(*args)
    except VerifierTimeout:
        return Verdict(False, False, None, reason=f"verifier timed out after {timeout_s}s")
    except Exception as error:  # a failure is a verdict, not a crash
        return Verdict(
            False, False, None, reason=f"verifier error: {type(error).__name__}: {error}"
        )
    if not isinstance(result, Verdict):
        return Verdict(
            False, False, None, reason=f"verifier returned {type(result).__name__}, not a Verdict"
        )
    return result
