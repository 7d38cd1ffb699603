"""Run one verifier call under a wall-clock limit, from any thread or process.

``signal.setitimer`` interrupts Python code only in the main thread, and math-verify's own
time-outs use ``signal.alarm`` (so off the main thread they raise ``ValueError`` instead
of limiting anything; rlvr calls math-verify with its time-outs disabled and applies this
one). The strategy follows where the call runs:

- ``"alarm"``: the main thread with no timer already set — a SIGALRM interrupts the call.
- ``"process"``: anywhere else — the call runs in a persistent helper process (started
  once, with the ``spawn`` method so no thread locks are inherited) that is killed and
  restarted when a call overruns. This also bounds C-level work a signal cannot stop.
- ``"thread"``: inside a daemonic process, which may not start children — the call runs
  in a daemon thread that is abandoned on time-out (the verdict still comes back on time).

``mode="process"`` forces the helper process even on the main thread.
"""

from __future__ import annotations

import importlib
import multiprocessing
import signal
import threading
from collections.abc import Callable
from typing import Any

MODES = ("auto", "alarm", "process", "thread")


class VerifierTimeout(BaseException):
    """The call ran past its limit; a BaseException so ``except Exception`` can't swallow it."""


def _raise_timeout(signum: int, frame: object) -> None:
    raise VerifierTimeout


def _alarm_usable() -> bool:
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
    if _alarm_usable():
        return "alarm"
    return "thread" if multiprocessing.current_process().daemon else "process"


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
        return _with_alarm(fn, args, timeout_s)
    if strategy == "process":
        return _HELPER.call(fn, args, timeout_s)
    return _with_thread(fn, args, timeout_s)


def _with_alarm(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


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


def _serve(connection: Any) -> None:
    """The helper process: import or call what arrives, reply ("ok", value) or ("error", exc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            fn, args = connection.recv()
        except EOFError:
            return
        try:
            reply = ("ok", fn(*args))
        except Exception as error:
            reply = ("error", error)
        try:
            connection.send(reply)
        except Exception as error:  # an unpicklable result
            connection.send(("error", TypeError(f"verifier result not picklable: {error}")))


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
    check, not a one-off import of sympy.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Any = None
        self._connection: Any = None
        self._modules: set[str] = set()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._connection = parent
        self._modules = set()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        self._process = self._connection = None

    def _roundtrip(self, fn: Callable[..., Any], args: tuple[Any, ...], limit_s: float) -> Any:
        self._connection.send((fn, args))
        if not self._connection.poll(limit_s):
            self._stop()
            raise VerifierTimeout
        return self._connection.recv()

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._start()
            module = getattr(fn, "__module__", None)
            if module and module not in self._modules:
                self._roundtrip(_import, (module,), IMPORT_LIMIT_S)
                self._modules.add(module)
            status, value = self._roundtrip(fn, args, timeout_s)
        if status == "error":
            raise value
        return value


_HELPER = _Helper()
