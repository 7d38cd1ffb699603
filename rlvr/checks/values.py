"""Value checks shared by every config and option parser, so a YAML typo gets a message
naming the field, not a traceback. A leaf module: it imports nothing of rlvr, so the pure-math `algo` package may use it.

bool is an int subclass in Python; none of these accept `True` as a number.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import fields
from typing import Any

_TYPES = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,), "dict": (dict,)}


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_int(name: str, value: object, low: int = 1, high: int | None = None) -> int:
    """`value` if it is an integer in [low, high] (no upper bound when `high` is None);
    otherwise a ValueError naming `name`, the bounds and the value."""
    if is_int(value) and low <= value and (high is None or value <= high):
        return value
    bounds = f"≥ {low}" if high is None else f"from {low} to {high}"
    raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")


def check_field_types(obj: Any) -> None:
    """Raise ValueError naming the first field whose value does not match its annotation.

    Understands the annotations used in this project: float, int, bool, str, dict, and
    `X | None`. bool is never accepted as a number.
    """
    for f in fields(obj):
        value = getattr(obj, f.name)
        names = [n.strip() for n in str(f.type).split("|")]
        if value is None and "None" in names:
            continue
        allowed = tuple(t for n in names for t in _TYPES.get(n, ()))
        if not allowed:
            continue
        is_bool = isinstance(value, bool)
        if (is_bool and bool not in allowed) or not isinstance(value, allowed):
            raise ValueError(
                f"{f.name} must be {' or '.join(names)}, got {value!r} ({type(value).__name__})"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value!r}")


def resolve_callable(reference: Any, field: str, kind: str = "function") -> Callable[..., Any]:
    """The callable `module:name` names, imported; errors name `field`, the reference and
    what is missing (a reward function, an environment class, a tool)."""
    if not isinstance(reference, str) or reference.count(":") != 1:
        raise ValueError(f"{field} must look like 'module:name', got {reference!r}")
    module_name, attribute = reference.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        hint = ""
        if isinstance(err, ModuleNotFoundError) and err.name == module_name.split(".")[0]:
            hint = (
                f" (the rlvr command imports your modules from the current directory, "
                f"{os.getcwd()}, and PYTHONPATH)"
            )
        raise ValueError(
            f"{field} {reference!r}: cannot import {module_name!r}: {err}{hint}"
        ) from err
    value = getattr(module, attribute, None)
    if not callable(value):
        raise ValueError(f"{field} {reference!r}: {module_name} has no {kind} {attribute!r}")
    return value
