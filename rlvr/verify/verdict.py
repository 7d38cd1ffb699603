"""The outcome of checking one completion, and a wrapper that turns failures into outcomes.

A verifier sees hostile text; whatever goes wrong inside it (an exception, a
pathological input that runs too long) must become a ``Verdict`` that scores the
completion as wrong, never an exception that stops a training run.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


class _VerifierTimeout(BaseException):
    """Raised by the alarm; a BaseException so a verifier's ``except Exception`` can't swallow it."""


def _raise_timeout(signum: int, frame: object) -> None:
    raise _VerifierTimeout


def _alarm_available() -> bool:
    # SIGALRM only reaches the main thread, and an alarm already set by someone else is theirs.
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    )


def _call_with_alarm(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


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
        if timeout_s > 0 and _alarm_available():
            result = _call_with_alarm(fn, args, timeout_s)
        else:
            result = fn(*args)
    except _VerifierTimeout:
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
