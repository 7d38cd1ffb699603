"""Type checks for frozen config dataclasses, so a YAML typo gets a message, not a traceback."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

_TYPES = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,), "dict": (dict,)}


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
