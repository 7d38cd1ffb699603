"""Value checks shared by every config and option parser (`values.py`). A leaf package: it
imports nothing else of rlvr, so every package, the pure-math `algo` included, may use it."""

from rlvr.checks.values import (
    check_field_types,
    check_int,
    is_int,
    is_number,
    resolve_callable,
)

__all__ = [
    "check_field_types",
    "check_int",
    "is_int",
    "is_number",
    "resolve_callable",
]
