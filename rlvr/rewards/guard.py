"""One call of a user's reward function, under a time limit, with every failure named.

A reward function is untrusted code: it may hang, raise, return the wrong count, a
non-number, NaN or inf. None of that may stop a run or pass silently. ``guarded_call``
runs it under the verifiers' time limit and isolation (``rlvr.verify.timeout``: an alarm
on the main thread, else a helper process; ``isolation="process"`` always uses the helper,
which also bounds C-level work a signal cannot stop) and returns, per completion, the
value or the reason it has none. What a failure then costs is the run's `reward_errors`
setting (``rlvr.rewards``).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlvr.verify.timeout import VerifierTimeout, call_with_timeout

KINDS = ("error", "timeout", "count", "type", "nonfinite")
"""Failure kinds, as counted in ``reward/fn/<name>/<kind>``: the call raised, ran past its
time limit, returned the wrong number of values, returned a non-number, or NaN/inf."""


@dataclass(frozen=True)
class CallResult:
    """One function's values over a batch: `values[i]` is a float, or None where the
    function does not apply (it returned None) or failed (`failures[i]` says why)."""

    values: list[float | None]
    failures: list[tuple[str, str] | None]  # (kind, message) per completion, or None


def check_signature(name: str, fn: Callable[..., Any]) -> None:
    """`fn` must take `prompts` and `completions` by keyword (TRL's convention)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    keyword = {
        n for n, p in parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    missing = [n for n in ("prompts", "completions") if n not in keyword]
    if missing:
        raise ValueError(
            f"reward function {name}{inspect.signature(fn)} cannot be called as "
            f"fn(prompts=..., completions=..., **columns): it takes no {', '.join(missing)} "
            f"keyword; define it as `def {fn.__name__}(prompts, completions, **columns)`"
        )


def call_arguments(name: str, fn: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments `fn` accepts out of `arguments`: all of them when it has
    `**kwargs`, else the ones it names; a required one that rlvr cannot give is an error
    naming what can be given."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return arguments
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return arguments
    required = [
        n
        for n, p in parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    unknown = [n for n in required if n not in arguments]
    if unknown:
        raise ValueError(
            f"reward function {name}{inspect.signature(fn)} needs {', '.join(map(repr, unknown))}, "
            f"which is not a dataset column nor an rlvr argument; available: "
            f"{', '.join(sorted(arguments))}"
        )
    return {k: v for k, v in arguments.items() if k in parameters}


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Module level, so the helper process can run it; a generator is drained in time."""
    result = fn(**kwargs)
    return list(result) if inspect.isgenerator(result) else result


def guarded_call(
    name: str,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    count: int,
    timeout_s: float,
    isolation: str,
) -> CallResult:
    """`fn(**kwargs)` within `timeout_s` seconds (0: no limit), checked to give `count`
    finite numbers or None; every failure is in the result, never raised."""
    try:
        result = call_with_timeout(_call, (fn, kwargs), timeout_s, isolation)
    except VerifierTimeout:
        return _failed(count, "timeout", f"{name} timed out after {timeout_s:g}s")
    except Exception as error:  # a user's bug costs the samples, not the run
        return _failed(count, "error", f"{name} raised {type(error).__name__}: {error}")
    unsized = not hasattr(result, "__len__") or getattr(result, "ndim", 1) == 0  # 0-d arrays
    if isinstance(result, str | bytes | dict) or unsized:
        return _failed(count, "type", f"{name} returned {type(result).__name__}, not a list")
    if len(result) != count:
        return _failed(
            count, "count", f"{name} returned {len(result)} rewards for {count} completions"
        )
    values: list[float | None] = []
    failures: list[tuple[str, str] | None] = []
    for i, value in enumerate(result):
        number, failure = _number(name, i, value)
        values.append(number)
        failures.append(failure)
    return CallResult(values, failures)


def _number(name: str, i: int, value: Any) -> tuple[float | None, tuple[str, str] | None]:
    if value is None:
        return None, None
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy / torch scalars
        value = value.item()
    if not isinstance(value, numbers.Real):  # bools count as 1 and 0
        return None, (
            "type",
            f"{name} returned {value!r} ({type(value).__name__}) for completion {i}",
        )
    if not math.isfinite(value):
        return None, ("nonfinite", f"{name} returned {value} for completion {i}")
    return float(value), None


def _failed(count: int, kind: str, message: str) -> CallResult:
    return CallResult([None] * count, [(kind, message)] * count)
