"""The first failure of each kind, printed: an environment that raised or answered
something that is not a `Reply`, a tool that failed, a call the environment could not
run. Each is printed once per run with its exception and where it came from (the
user's file and line), then only counted (`env/failed_frac`, `env/tool_error_rate`,
`env/valid_call_rate`), under every `episode.env_errors` mode: a broken environment is
never silent, and a thousand broken episodes do not print a thousand lines.

`watched(make, notices, origin)` wraps a config's environment factory so that every
episode's environment reports to one `FailureNotices`, in the trainer's process. With
`env_isolation: process` it wraps the isolated environment (whose worker's output goes
nowhere): the exception comes back rebuilt, without the worker's traceback, so the place
shown is where the user's method is defined.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.verify.timeout import VerifierTimeout

KINDS = ("environment", "tool", "call")
RLVR = Path(__file__).resolve().parents[1]
COST = {
    "drop": "the sample is flagged and its prompt group left out of the update",
    "keep": "the sample is flagged and trained on as the episode ended",
    "stop": "the run ends",
}


class FailureNotices:
    """Prints the first failure of each of `KINDS` for the environment `name`."""

    def __init__(self, name: str, env_errors: str) -> None:
        self.name, self.env_errors = name, env_errors
        self.printed: set[str] = set()  # the KINDS printed so far

    def _first(self, kind: str) -> bool:
        if kind in self.printed:
            return False
        self.printed.add(kind)
        return True

    def environment(self, during: str, failure: BaseException | str, where: str | None) -> None:
        """The environment failed `during` make, reset or step."""
        if not self._first("environment"):
            return
        cost = COST.get(self.env_errors, COST["drop"])
        _print(
            f"the environment {self.name} failed in {during}: {_text(failure)}",
            _at(_where(failure, where)),
            f"episode.env_errors={self.env_errors!r}: {cost}"
            + (
                ". Further environment failures are counted (env/failed_frac), not printed; "
                "episode.env_errors: stop ends the run at the first"
                if self.env_errors != "stop"
                else ""
            ),
            failure,
        )

    def tool(self, reply: Reply, error: BaseException | None, name: str | None, fn: Any) -> None:
        """The tool `name` (the function `fn`, where known) raised or timed out; `reply` is
        what the policy was answered."""
        if not self._first("tool"):
            return
        what = _text(error) if error is not None else reply.observation.strip()
        where = _where(error, defined_at(fn) if fn is not None else None)
        call = f"the call was {reply.call}" if reply.call else None
        _print(
            f"the tool {name or '(unnamed)'} of {self.name} failed ({reply.tool_error}): {what}",
            "; ".join(filter(None, [where and f"at {where}", call])) or None,
            "the policy hears the error as the call's observation and the episode goes on. "
            "Further tool failures are counted (env/tool_error_rate), not printed",
            error,
        )

    def call(self, reply: Reply) -> None:
        """The policy's call could not be run (unparsable, or naming no tool)."""
        if not self._first("call"):
            return
        _print(
            f"the policy made a call that {self.name} could not run: {reply.observation.strip()}",
            None,
            "it hears that as the call's observation. Further invalid calls are counted "
            "(env/valid_call_rate), not printed",
            None,
        )


def _at(where: str | None) -> str | None:
    return f"at {where}" if where else None


def _text(failure: BaseException | str) -> str:
    if isinstance(failure, str):
        return failure
    return f"{type(failure).__name__}: {failure}"


def _where(failure: BaseException | str | None, fallback: str | None) -> str | None:
    """The innermost frame of the traceback in the user's code (else the innermost),
    else `fallback`."""
    frames = (
        traceback.extract_tb(failure.__traceback__) if isinstance(failure, BaseException) else []
    )
    if not frames:
        return fallback
    theirs = [f for f in frames if not Path(f.filename).resolve().is_relative_to(RLVR)]
    if not theirs:
        return fallback or _frame(frames[-1])
    return _frame(theirs[-1])


def _frame(frame: traceback.FrameSummary) -> str:
    line = f": {frame.line.strip()}" if frame.line else ""
    return f"{_shown(frame.filename)}:{frame.lineno}, in {frame.name}{line}"


def _shown(filename: str) -> str:
    """`filename` relative to the current directory when inside it, else as it is."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith("..") else relative


def defined_at(obj: Any) -> str | None:
    """`file:line, in name` where a function or class is defined, or None."""
    try:
        target = inspect.unwrap(obj)
        _, start = inspect.getsourcelines(target)
        return f"{_shown(inspect.getsourcefile(target) or '?')}:{start}, in {target.__qualname__}"
    except (TypeError, OSError, AttributeError):
        return None


def _print(headline: str, where: str | None, after: str, error: BaseException | str | None) -> None:
    from tqdm import tqdm

    lines = [f"rlvr: {headline}"]
    if where:
        lines.append(f"  {where}")
    debug = os.environ.get("RLVR_DEBUG") and isinstance(error, BaseException)
    if isinstance(error, BaseException) and not debug:
        after += "; RLVR_DEBUG=1 prints the traceback"
    lines.append(f"  ({after})")
    if debug:
        lines += traceback.format_exception(error)
    tqdm.write("\n".join(line.rstrip("\n") for line in lines), file=sys.stderr)


class Watched(Environment):
    """An episode's environment whose failures are reported to `notices` (and still
    raised or returned, for the episode loop to flag and count as before)."""

    def __init__(self, inner: Environment, notices: FailureNotices, origin: Any = None) -> None:
        """`origin`: the user's class, where a failure without a frame of the user's code
        is shown to come from (an isolated environment's, or a wrong return value)."""
        self.inner, self.notices, self.origin = inner, notices, origin

    @property
    def stop(self) -> tuple[str, ...]:  # type: ignore[override]
        """The wrapped environment's, read each turn (it may set them in `reset`)."""
        return self.inner.stop

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reset(self, problem: Any) -> None:
        self._guarded("reset", self.inner.reset, problem)

    def step(self, turn: str) -> Reply:
        reply = self._guarded("step", self.inner.step, turn)
        where = self._defined("step", self.inner.step)
        if not isinstance(reply, Reply):
            problem = f"step returned {type(reply).__name__}, not a Reply"
            self.notices.environment("step", problem, where)
        elif not isinstance(reply.observation, str):
            problem = f"Reply.observation is {type(reply.observation).__name__}, not a str"
            self.notices.environment("step", problem, where)
        elif reply.tool_error:
            error = getattr(self.inner, "last_error", None)
            name = _called(reply.call)
            tools = getattr(self.inner, "tools", None)
            fn = tools.get(name) if isinstance(tools, dict) else None
            self.notices.tool(reply, error, name, fn)
        elif reply.invalid_call:
            self.notices.call(reply)
        return reply

    def _defined(self, name: str, method: Callable[[Any], Any]) -> str | None:
        """Where the user's `name` method is defined: the origin class's, else `method`'s."""
        own = getattr(self.origin, name, None) if inspect.isclass(self.origin) else None
        return defined_at(own or method)

    def _guarded(self, during: str, method: Callable[[Any], Any], argument: Any) -> Any:
        try:
            return method(argument)
        except VerifierTimeout:
            self.notices.environment(during, "ran past episode.env_timeout_s", None)
            raise
        except Exception as error:
            self.notices.environment(during, error, self._defined(during, method))
            raise


def _called(call: str | None) -> str | None:
    """The tool name of a call as the environment read it: a tags call `<name>...</name>`,
    a hermes call's JSON `name`, a qwen_xml `<function=name>`; None when unknown."""
    if not call:
        return None
    if call.startswith("<function="):
        return call[len("<function=") : call.find(">")]
    if call.startswith("<") and ">" in call:
        return call[1 : call.index(">")]
    try:
        named = json.loads(call)
    except ValueError:
        return None
    return named.get("name") if isinstance(named, dict) else None


def watched(
    make: Callable[[Any], Environment], notices: FailureNotices, origin: Any = None
) -> Callable[[Any], Environment]:
    """A per-episode factory like `make` (problem → environment) whose environments
    report to `notices`; a failure to make one is reported, then raised. `origin`, the
    user's class or factory, is where a failure without a frame of the user's came from.
    An isolated factory's `pool` stays reachable."""

    def environment(problem: Any) -> Environment:
        try:
            env = make(problem)
        except VerifierTimeout:
            notices.environment("make", "ran past episode.env_timeout_s", None)
            raise
        except Exception as error:
            notices.environment("make", error, defined_at(origin) if origin else None)
            raise
        return Watched(env, notices, origin)

    for name in ("isolated", "pool"):  # rlvr.envs.isolated's marks of its factory
        if hasattr(make, name):
            setattr(environment, name, getattr(make, name))
    return environment
