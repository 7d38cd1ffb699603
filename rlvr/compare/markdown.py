"""The report's Markdown pieces: a table, a mean as text."""

from __future__ import annotations

import numpy as np


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def mean_text(values: list[float | None], fmt: str = "{:,.0f}") -> str:
    """The mean of the finite values in `fmt`, or "—" when there is none."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return fmt.format(float(np.mean(finite))) if finite else "—"
