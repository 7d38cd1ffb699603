"""Environments hosted in worker processes (`episode.env_isolation: process`).

In the trainer's process (`none`, the default) an environment's `reset` and `step` run
under `env_timeout_s` (an alarm): a Python exception or a hang in Python code costs the
sample, but an environment that calls `os._exit`, crashes the interpreter (a segfault in C
code), exhausts memory or holds off the alarm (C code, a blocked SIGALRM) ends or hangs the
run. With isolation each episode's environment is made in a worker process forked from
the trainer (its state lives there), and `reset` and `step` are forwarded over a pipe,
each answer awaited with a deadline. A worker that runs past `env_timeout_s`, dies, or
answers anything but a plain reply is killed with its process group, and the call raises
as an in-process environment failure would (`VerifierTimeout` or an `Exception`), so the
episode loop flags it (`env_failed`) and `env_errors` says what it costs. A worker's
standard output and error go to /dev/null: what an environment prints never reaches the
training log (its exceptions come back over the pipe).

What comes back is JSON (a reply's plain fields, or an error's name and arguments): the
trainer never unpickles what a worker sends. A worker serves one episode at a time; when
its episode ends well it waits in its `WorkerPool` for the next one (forking costs tens of
milliseconds), a failed one is killed. Workers are killed when their pool is collected,
at exit, and (Linux, when forked on the main thread) when the trainer itself dies
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import fields
from multiprocessing.connection import Connection, Pipe
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.verify.timeout import VerifierTimeout

MAX_OBSERVATION_CHARS = 2**18
"""A worker sends at most this many characters of an observation: the episode keeps at
most `max_observation_tokens × 64` of them before tokenising (4,096 tokens' worth here)."""
MAX_MESSAGE_BYTES = 4 * 2**20
"""A worker's answer larger than this is garbage: the observation in it is cut to
MAX_OBSERVATION_CHARS (≤ 3 MiB as JSON, 12 bytes for an escaped character at most), so a
bigger message would only cost the trainer memory and time (security audit F12)."""
FLAG_TYPES = {
    "done": (bool, int),
    "tool_call": (bool, int),
    "invalid_call": (bool, int),
    "tool_error": (str, type(None)),
}
"""What a `Reply`'s flags may hold when they come back from a worker."""


_PIPES: weakref.WeakSet[Connection] = weakref.WeakSet()
"""The trainer's ends of the live workers' pipes."""


class WorkerFailed(RuntimeError):
    """The worker died, answered garbage, or raised an exception that is not rebuilt as
    itself (only Python's built-in exceptions are)."""


def isolation_problem(memory_mb: int | None) -> str | None:
    """Why `env_isolation: process` (with `env_memory_mb`) cannot take effect here, if so."""
    if not hasattr(os, "fork"):
        return "it forks worker processes, and this platform has no fork"
    if memory_mb is not None and not sys.platform.startswith("linux"):
        return "env_memory_mb is enforced on Linux only (RLIMIT_AS over /proc/self/status)"
    return None


def isolate(
    make: Callable[[Any], Environment], timeout_s: float, memory_mb: int | None = None
) -> Callable[[Any], Environment]:
    """A factory like `make` (problem → environment) whose environments each live in a
    worker process (`IsolatedEnvironment`), taken from a pool of its own (`.pool`)."""
    pool = WorkerPool(make, memory_mb)

    def environment(problem: Any) -> Environment:
        return IsolatedEnvironment(pool, problem, timeout_s)

    environment.isolated = True  # attach_environment wraps a factory once
    environment.pool = pool
    return environment


class WorkerPool:
    """Workers that make `make(problem)`'s environment and serve it, one episode at a
    time each. A worker whose episode ended well waits here for the next one: a fork per
    episode costs tens of milliseconds in a trainer's process (benchmarks/RESULTS.md), a
    reused worker nothing. A worker that failed is killed, never reused."""

    def __init__(self, make: Callable[[Any], Environment], memory_mb: int | None = None) -> None:
        """`memory_mb`: address space a worker may add to the trainer's it was forked from."""
        self.make, self.memory_mb = make, memory_mb
        self.idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.close = weakref.finalize(self, _kill_all, self.idle)  # collected, or at exit

    def take(self) -> _Worker:
        """An idle worker, or a new one forked now."""
        with self._lock:
            while self.idle:
                worker = self.idle.pop()
                if not worker.connection.poll(0):  # an idle worker has nothing to say
                    return worker
                worker.kill()  # it died, or talks out of turn
        return _Worker(self.make, self.memory_mb)

    def give_back(self, worker: _Worker) -> None:
        with self._lock:
            self.idle.append(worker)


def _kill_all(workers: list[_Worker]) -> None:
    while workers:
        workers.pop().kill()


class IsolatedEnvironment(Environment):
    """The environment `pool.make(problem)` makes, in a worker of `pool`; see the module
    docstring."""

    def __init__(self, pool: WorkerPool, problem: Any, timeout_s: float) -> None:
        """`timeout_s`: the limit of making the environment and of each call (0: none)."""
        self.timeout_s = timeout_s
        self._pool, self._worker = pool, pool.take()
        self._lock, self._busy = threading.Lock(), False
        self._kill = weakref.finalize(self, self._worker.kill)  # collected mid-episode
        self.stop = self._exchange(("make", problem), _stop_strings)

    def reset(self, problem: Any) -> None:
        self._exchange(("reset", problem), lambda value: None)

    def stops_in(self, text: str) -> tuple[str, ...]:
        """The stop strings the worker's environment finds in `text` (a `ToolEnvironment`:
        the closing tag of a call to a tool it lacks, which must end the turn here too);
        none for an environment without `stops_in`."""
        return self._exchange(("stops_in", text), _stop_strings)

    def step(self, turn: str) -> Reply:
        reply = self._exchange(("step", turn), _reply)
        if reply.done:
            self.close()  # no step follows
        return reply

    def close(self) -> None:
        """End the episode: its worker, between calls and healthy, goes back to the pool
        (a failed one was killed already); no call may follow."""
        with self._lock:
            if self._busy:  # a call abandoned on another thread (a thread's time-out)
                self._kill()
            if not self._kill.detach():
                return  # closed already, or killed
        try:
            self._worker.connection.send(("end", None))
        except OSError:
            self._worker.kill()
            return
        self._pool.give_back(self._worker)

    def _exchange(self, request: tuple[str, Any], read: Callable[[Any], Any]) -> Any:
        """Send `request`, decode the answer with `read`; any failure (a timeout, a death,
        garbage, an error raised there, the caller's own alarm) kills the worker and
        raises."""
        with self._lock:
            if not self._kill.alive:
                raise WorkerFailed(f"{request[0]} called after the episode's environment ended")
            self._busy = True
        try:
            self._worker.send(request)
            message = self._worker.receive(self.timeout_s)
            if "error" in message:
                raise _rebuilt(message["error"], message.get("args"))
            return read(message.get("value"))
        except BaseException:
            self._kill()
            raise
        finally:
            self._busy = False


class _Worker:
    """One forked process serving one episode's environment at a time, in a process group
    of its own."""

    def __init__(self, make: Callable[[Any], Environment], memory_mb: int | None) -> None:
        parent, child = Pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the worker would print the trainer's buffered text again
        main = threading.current_thread() is threading.main_thread()
        trainer = os.getpid()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:  # no alarm may land between the fork and `self.pid`: no worker goes unowned
            self.pid = os.fork()
            if self.pid == 0:
                try:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    for other in [parent, *_PIPES]:  # no worker holds another one's pipe
                        other.close()
                    _serve(child, make, memory_mb, trainer if main else None)
                finally:
                    os._exit(0)  # never the trainer's code or exit handlers
            self.alive, self.status = True, None  # status: how it ended, once reaped
            _set_group(self.pid)
            child.close()
            self.connection: Connection = parent
            _PIPES.add(parent)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def send(self, request: tuple[str, Any]) -> None:
        try:
            self.connection.send(request)
        except (BrokenPipeError, ConnectionResetError):
            raise WorkerFailed(f"the environment's worker process died ({self.ended()})") from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The worker's next message; VerifierTimeout past `timeout_s` (0: none)."""
        if not self.connection.poll(timeout_s if timeout_s > 0 else None):
            raise VerifierTimeout
        try:
            data = self.connection.recv_bytes(MAX_MESSAGE_BYTES)
        except EOFError:
            raise WorkerFailed(f"the environment's worker process died ({self.ended()})") from None
        except OSError as error:  # longer than MAX_MESSAGE_BYTES, or a broken pipe
            raise WorkerFailed(f"the environment's worker sent garbage ({error})") from None
        try:
            message = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            message = None
        if not isinstance(message, dict) or not ({"value", "error"} & set(message)):
            raise WorkerFailed(f"the environment's worker sent garbage: {bytes(data[:80])!r}")
        return message

    def ended(self, grace_s: float = 1.0) -> str:
        """How the worker ended, waiting up to `grace_s` for it to finish dying."""
        deadline = time.monotonic() + grace_s
        while self.alive and time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
                break
            time.sleep(0.005)
        self.kill()
        return self.status or "it closed its pipe"

    def kill(self) -> None:
        """SIGKILL its process group, reap it; idempotent. An alarm waits until it is done
        (an interrupted reap would leave a zombie)."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            if self.alive:
                for kill in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(self.pid, signal.SIGKILL)
                try:
                    self._reaped(os.waitpid(self.pid, 0)[1])
                except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler)
                    self.alive = False
            self.connection.close()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _reaped(self, status: int) -> None:
        self.alive = False
        code = os.waitstatus_to_exitcode(status)
        self.status = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def _set_group(pid: int) -> None:
    """The worker leads a process group of its own (set on both sides of the fork, so it
    holds whichever runs first): one kill reaches whatever it started."""
    with contextlib.suppress(OSError):  # it already did, or already died: `kill` finds it
        os.setpgid(pid, pid)


def _serve(
    connection: Connection,
    make: Callable[[Any], Environment],
    memory_mb: int | None,
    trainer: int | None,
) -> None:
    """The worker: for each episode, make the environment and answer its calls; exit when
    the pipe closes. With the `trainer`'s pid (forked on its main thread), it dies with
    the trainer."""
    os.setpgid(0, 0)
    _silence()
    for name in ("SIGINT", "SIGTERM"):  # not the trainer's handlers (a checkpoint on SIGTERM)
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    if trainer is not None:
        _die_with_parent(trainer)
    if memory_mb is not None:
        _limit_memory(memory_mb)
    env = None
    while True:
        try:
            method, argument = connection.recv()
        except EOFError:
            return
        if method == "end":
            env = None
        elif method == "make":
            env = _respond(connection, make, "made", argument)
        else:
            _respond(connection, _call, method, env, method, argument)


def _silence() -> None:
    """Point the worker's standard output and error at /dev/null: an environment that
    prints, however much, never writes into the trainer's log (audit F13)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def _call(env: Environment | None, method: str, argument: Any) -> Any:
    if method == "stops_in" and not hasattr(env, "stops_in"):
        return ()
    return getattr(env, method)(argument)


def _respond(connection: Connection, call: Callable[..., Any], method: str, *args: Any) -> Any:
    """Run `call(*args)`, send its encoded result (or the error it raised) as JSON; return the
    result (None when it failed)."""
    try:
        result = call(*args)
        message = {"value": _encode(method, result)}
    except BaseException as error:  # SystemExit too: the worker reports, never just exits
        result, message = None, _error(error)
    try:
        data = json.dumps(message).encode()
    except (TypeError, ValueError) as error:  # a reply field that json cannot write
        plain = TypeError(f"{method} returned what is not plain data ({error})")
        result, data = None, json.dumps(_error(plain)).encode()
    connection.send_bytes(data)
    return result


def _encode(method: str, result: Any) -> Any:
    if method == "made":
        if not isinstance(result, Environment):
            raise TypeError(f"the factory made a {type(result).__name__}, not an Environment")
        return list(result.stop) if isinstance(result.stop, list | tuple) else result.stop
    if method == "step" and isinstance(result, Reply):
        plain = {f.name: _plain(getattr(result, f.name)) for f in fields(Reply)}
        if isinstance(plain["observation"], str):  # cut here, not shipped to be cut there
            plain["observation"] = plain["observation"][:MAX_OBSERVATION_CHARS]
        return plain
    if method == "step":
        return {"not_a_reply": type(result).__name__}
    if method == "stops_in":
        return list(result) if isinstance(result, list | tuple) else result
    return None


def _plain(value: Any) -> Any:
    """numpy scalars as Python's (a numpy bool for `done`); the rest as it is."""
    if isinstance(value, str | bool | int | float | type(None)) or not hasattr(value, "item"):
        return value
    return value.item() if getattr(value, "ndim", None) == 0 else value


def _error(error: BaseException) -> dict[str, Any]:
    args = [a if isinstance(a, str | int | float | bool) else repr(a) for a in error.args]
    return {"error": type(error).__name__, "args": args}


def _rebuilt(name: Any, args: Any) -> Exception:
    """A built-in exception as itself (its message reads as in the trainer's process);
    any other as a WorkerFailed naming it."""
    args = list(args) if isinstance(args, list) else []
    cls = getattr(builtins, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(*args)
        except Exception:  # a built-in that needs other arguments
            pass
    return WorkerFailed(f"{name}: {', '.join(map(str, args))}")


def _stop_strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise WorkerFailed(f"the environment's stop must be strings, got {value!r}")
    return tuple(value)


def _reply(value: Any) -> Reply:
    """A Reply from its fields as sent. The episode loop checks `observation` and `reward`
    as it checks an in-process reply's; a flag of the wrong type is named here."""
    if isinstance(value, dict) and "not_a_reply" in value:
        raise TypeError(f"step returned {value['not_a_reply']}, not a Reply")
    if not isinstance(value, dict) or set(value) != {f.name for f in fields(Reply)}:
        raise WorkerFailed(f"the environment's worker sent garbage: {value!r:.80}")
    for name, types in FLAG_TYPES.items():
        if not isinstance(value[name], types):
            raise TypeError(f"Reply.{name} is {type(value[name]).__name__}: {value[name]!r:.80}")
    return Reply(**value)


PR_SET_PDEATHSIG = 1


def _die_with_parent(trainer: int) -> None:
    """Linux: SIGKILL the worker when the thread that forked it (the trainer's main
    thread) dies, so even a killed trainer leaves no worker behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the closed pipe ends an idle worker
        return
    if os.getppid() != trainer:  # it died before prctl took effect
        os._exit(0)


def _limit_memory(memory_mb: int) -> None:
    """RLIMIT_AS: the address space the worker inherited plus `memory_mb` MiB."""
    with open("/proc/self/status") as status:
        size_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    limit = size_kb * 1024 + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
