"""What every subcommand shares: the one-line error and a plain-text table."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def format_table(rows: list[dict[str, str]], columns: Sequence[str]) -> str:
    """A plain-text table with aligned columns."""
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    line = lambda r: "  ".join(r[c].ljust(widths[c]) for c in columns).rstrip()  # noqa: E731
    header = {c: c for c in columns}
    rule = {c: "-" * widths[c] for c in columns}
    return "\n".join(line(r) for r in [header, rule, *rows])


def fail(message: str) -> int:
    """Print `rlvr: error: message` on stderr; the exit status of a refused command (2)."""
    print(f"rlvr: error: {message}", file=sys.stderr)
    return 2


def task_help() -> str:
    from rlvr.tasks import TASKS

    return f"task name: {', '.join(TASKS)}"
