"""The checks a run's environment class, its `environment_options` and its tools get when
the run starts, before any episode: a mistake that would fail every episode (a `step`
that cannot take the turn, an abstract `step`, a class that is no `Environment`, an
option the class does not take, a tool no call can reach) is a config error, named in
one line with the field, not a flagged sample per episode.

What can only show when the code runs (a `step` that raises, or returns a `str`) is
printed the first time it happens (`rlvr.envs.notices`).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from rlvr.envs.base import Environment

METHODS = {"step": ("turn",), "reset": ("problem",)}
"""The methods the episode loop calls on an environment and the arguments it passes."""


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: trust it
        return None


def _takes(signature: inspect.Signature | None, *args: Any, **kwargs: Any) -> bool:
    if signature is None:
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def check_environment(factory: Callable[..., Any], options: dict[str, Any], name: str) -> None:
    """`factory` (the class or function `environment: name` names) can make an environment
    from `options`: a class subclasses `Environment`, defines `step(turn)` (and `reset`,
    if it overrides it) with the arguments the loop passes, and takes every option."""
    if inspect.isclass(factory):
        if not issubclass(factory, Environment):
            raise ValueError(
                f"environment {name!r}: {factory.__name__} does not subclass "
                f"rlvr.envs.Environment; define it as `class {factory.__name__}(Environment)` "
                f"with step(self, turn: str) -> Reply"
            )
        _check_abstract(factory, name)
        for method, arguments in METHODS.items():
            _check_method(factory, method, arguments, name)
    check_options(factory, options, f"environment {name!r}", "environment_options")


def _check_abstract(cls: type, name: str) -> None:
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if not missing:
        return
    own = [a for a in vars(cls) if not a.startswith("_")]
    hints = []
    for method in missing:
        near = difflib.get_close_matches(method, own, n=1, cutoff=0.6)
        if near:
            hints.append(f"it defines {near[0]!r}: a typo for {method!r}?")
    raise ValueError(
        f"environment {name!r}: {cls.__name__} does not define {', '.join(missing)}, which "
        f"every Environment must (step(self, turn: str) -> Reply)"
        + (f"; {' '.join(hints)}" if hints else "")
    )


def _check_method(cls: type, method: str, arguments: tuple[str, ...], name: str) -> None:
    fn = inspect.getattr_static(cls, method, None)
    if isinstance(fn, staticmethod | classmethod) or not inspect.isfunction(fn):
        return  # an unusual definition: the first call will tell
    if _takes(_signature(fn), None, *arguments):
        return
    given = ", ".join(arguments)
    returns = " -> Reply" if method == "step" else ""
    raise ValueError(
        f"environment {name!r}: {cls.__name__}.{method}{_signature(fn)} cannot be called as "
        f"{method}({given}); define it as `def {method}(self, {given}){returns}`"
    )


def check_options(
    factory: Callable[..., Any], options: dict[str, Any], what: str, field: str
) -> None:
    """`factory(**options)` binds: every key is a parameter, every parameter without a
    default is given."""
    signature = _signature(factory)
    if signature is None or _takes(signature, **options):
        return
    parameters = signature.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        named = [
            n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        for key in sorted(set(options) - set(named)):
            near = difflib.get_close_matches(key, named, n=1)
            raise ValueError(
                f"{field}: {what} takes no option {key!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; it takes: {', '.join(named) or 'none'}"
            )
    required = [
        n
        for n, p in parameters.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n not in options
    ]
    if required:
        raise ValueError(
            f"{field}: {what} needs {', '.join(map(repr, required))} (no default); set "
            f"{field}: {{{required[0]}: ...}}"
        )
    raise ValueError(f"{field}: {what}{signature} cannot be called with {sorted(options)}")


def check_tool(fn: Callable[..., Any], field: str, tool_format: str) -> None:
    """A tool can be called the way `tool_format` calls it: with `tags`, as `fn(text)` (the
    text between its tags) or `fn(**object)` (a JSON object); in a chat format, always as
    `fn(**arguments)`, so no parameter may be positional-only."""
    signature = _signature(fn)
    if signature is None:
        return
    parameters = signature.parameters.values()
    by_name = [p for p in parameters if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    name = getattr(fn, "__name__", "tool")
    if tool_format != "tags":
        if by_name:
            raise ValueError(
                f"{field}: {name}{signature} has positional-only parameters "
                f"({', '.join(p.name for p in by_name)}), but a chat-format tool is called "
                f"with keyword arguments, {name}(**arguments); drop the '/'"
            )
        return
    if _takes(signature, "text") or (not by_name and len(signature.parameters) > 0):
        return
    raise ValueError(
        f"{field}: {name}{signature} cannot be called: a tags tool is called with the text "
        f"between its tags, {name}(text), or with a JSON object's keys as keyword "
        f"arguments; define it as `def {name}(argument: str) -> str`"
    )
