"""Run one verifier call under a wall-clock limit, from any thread or process.

``signal.setitimer`` interrupts Python code only in the main thread, and math-verify's own
time-outs use ``signal.alarm`` (so off the main thread they raise ``ValueError`` instead
of limiting anything; rlvr calls math-verify with its time-outs disabled and applies this
one). The strategy follows where the call runs:

- ``"alarm"``: the main thread with no timer already set — a SIGALRM interrupts the call.
- ``"process"``: anywhere else (other threads, worker processes' threads) — the call runs
  in a persistent helper process (``python -m rlvr.verify_helper``, started once with
  ``subprocess``, so it works inside daemonic workers and never re-imports the caller's
  ``__main__``) that is killed and restarted when a call overruns. This also bounds
  C-level work a signal cannot stop.
- ``"thread"`` (only when asked for): the call runs in a daemon thread that is abandoned
  on time-out; the verdict comes back on time but the work goes on in the background.

``mode="process"`` forces the helper process even on the main thread.
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from rlvr.verify_helper import read_message, write_message

MODES = ("auto", "alarm", "process", "thread")


class VerifierTimeout(BaseException):
    """The call ran past its limit; a BaseException so ``except Exception`` can't swallow it."""


RETRY_S = 0.1
"""After the limit, the alarm fires again every RETRY_S until the call has stopped: a bare
``except:`` in third-party code (sympy has some) swallows one VerifierTimeout, not all."""


def _raise_timeout(signum: int, frame: Any) -> None:
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)  # again, should this one be swallowed
    if not _reporting(frame):
        raise VerifierTimeout


def _reporting(frame: Any) -> bool:
    """The interrupted code is formatting a traceback: e.g. an unraisable-exception hook
    reporting a VerifierTimeout that a `__del__` swallowed. Raising there would break the
    report, not stop the call; the next tick (RETRY_S) raises in the call's own code."""
    while frame is not None:
        if frame.f_code.co_filename == traceback.__file__:
            return True
        frame = frame.f_back
    return False


def alarm_usable() -> bool:
    """SIGALRM only reaches the main thread, and an alarm already set by someone else is
    theirs."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    )


def choose_mode(mode: str = "auto") -> str:
    """The strategy ``call_with_timeout`` will use here and now for ``mode``."""
    if mode not in MODES:
        raise ValueError(f"timeout mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode
    return "alarm" if alarm_usable() else "process"


def call_with_timeout(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float, mode: str = "auto"
) -> Any:
    """``fn(*args)``, or ``VerifierTimeout`` after ``timeout_s`` seconds (0: no limit).

    With the process strategy ``fn`` and ``args`` must be picklable (a module-level
    function); exceptions raised by ``fn`` are re-raised here in every strategy.
    """
    if timeout_s <= 0:
        return fn(*args)
    strategy = choose_mode(mode)
    if strategy == "alarm":
        return with_alarm(fn, args, timeout_s)
    if strategy == "process":
        return _HELPER.call(fn, args, timeout_s)
    return _with_thread(fn, args, timeout_s)


def with_alarm(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        return fn(*args)
    finally:
        _disarm(previous)


def _disarm(previous: Any) -> None:
    """Cancel the alarm and restore the previous handler; an alarm landing meanwhile (its
    VerifierTimeout) only makes it try again, so neither step is ever skipped."""
    while True:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)
            return
        except VerifierTimeout:
            continue


def _with_thread(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as error:
            box["error"] = error

    worker = threading.Thread(target=target, daemon=True, name="rlvr-verifier")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise VerifierTimeout  # the thread is abandoned; it cannot be stopped from outside
    if "error" in box:
        raise box["error"]
    return box["value"]


def _import(name: str) -> None:
    module = importlib.import_module(name)
    if callable(getattr(module, "warm_up", None)):
        module.warm_up()


IMPORT_LIMIT_S = 120.0
"""How long the helper may take to import a verifier's module (sympy takes seconds)."""


class _Helper:
    """One persistent helper process shared by all threads (calls are serialised).

    Before a function's first call the helper imports its module (and runs its
    ``warm_up()``, if it has one) without the call's time limit, so the limit measures the
    check, not a one-off import of sympy. The helper sees the parent's ``sys.path``, so
    user modules (reward functions, custom verifiers) import there too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._modules: set[str] = set()
        self._owner = os.getpid()

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "rlvr.verify_helper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._modules = set()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def _roundtrip(self, fn: Callable[..., Any], args: tuple[Any, ...], limit_s: float) -> Any:
        process = self._process
        try:
            write_message(process.stdin, (fn, args))
        except BrokenPipeError:
            self._stop()
            raise RuntimeError("the verifier helper process exited") from None
        ready, _, _ = select.select([process.stdout], [], [], limit_s)
        if not ready:
            self._stop()
            raise VerifierTimeout
        try:
            return read_message(process.stdout)
        except EOFError:
            self._stop()
            raise RuntimeError("the verifier helper process exited") from None

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
        if self._owner != os.getpid():  # a forked child must not share its parent's helper
            self.__init__()
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            module = getattr(fn, "__module__", None)
            if module and module not in self._modules:
                status, value = self._roundtrip(_import, (module,), IMPORT_LIMIT_S)
                if status == "error":
                    raise value
                self._modules.add(module)
            status, value = self._roundtrip(fn, args, timeout_s)
        if status == "error":
            raise value
        return value


_HELPER = _Helper()
