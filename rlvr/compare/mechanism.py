"""Manipulation checks: a prediction is tested only where its mechanism measurably acts.

A claim about clip-higher says nothing on a run where no token reaches the upper clip; a
claim about length normalisation says nothing where no response hits the budget. A
hypothesis (or one prediction) names the mechanism's activity metric, how a cell's
history becomes one number (`statistic`, as for predictions), the conditions where it
must act and the least activity that makes the test meaningful:

    mechanism: {metric: clip/high_frac, statistic: mean, min: 0.01, conditions: [symmetric]}

The measured activity of a condition is the mean over its seeds of the cell statistic.
The check passes iff every named condition reaches `min`; otherwise the prediction
"cannot be tested here (measured X < threshold Y)", never replicated or not replicated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.compare.stats import cell_statistic

MECHANISM_KEYS = {"metric", "min", "statistic", "conditions", "why"}
STATISTICS = ("final", "mean", "growth")


@dataclass(frozen=True)
class Mechanism:
    metric: str
    min: float
    conditions: tuple[str, ...] = ()  # empty: the conditions of the predictions it gates
    statistic: str = "mean"
    why: str = ""

    def describe(self) -> str:
        where = f" in {', '.join(self.conditions)}" if self.conditions else ""
        return f"{self.statistic}({self.metric}) ≥ {self.min:g}{where}"


@dataclass(frozen=True)
class MechanismCheck:
    mechanism: Mechanism
    measured: dict[str, float]  # condition → mean over its seeds (NaN: never logged)

    @property
    def passed(self) -> bool:
        return bool(self.measured) and all(
            math.isfinite(v) and v >= self.mechanism.min for v in self.measured.values()
        )

    def describe(self) -> str:
        m = self.mechanism
        values = ", ".join(f"{k} {_num(v)}" for k, v in self.measured.items()) or "no cells"
        if self.passed:
            return f"{m.statistic}({m.metric}) acts: measured {values} ≥ {m.min:g}"
        return f"measured {m.statistic}({m.metric}) {values} < threshold {m.min:g}"


def _num(value: float) -> str:
    return "never logged" if not math.isfinite(value) else f"{value:.4g}"


def mechanisms_from(raw: Any, where: str, labels: Sequence[str] | None) -> tuple[Mechanism, ...]:
    """Parse `mechanism:` (one mapping or a list of them) at `where` (for messages)."""
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for i, item in enumerate(items):
        at = f"{where}.mechanism" + (f"[{i}]" if isinstance(raw, list) else "")
        if not isinstance(item, Mapping):
            raise ValueError(f"{at} must be a mapping {{metric, min, ...}}, got {item!r}")
        unknown = sorted(set(item) - MECHANISM_KEYS)
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {unknown}; valid: {sorted(MECHANISM_KEYS)}")
        missing = sorted({"metric", "min"} - set(item))
        if missing:
            raise ValueError(f"{at} needs {missing}")
        if isinstance(item["min"], bool) or not isinstance(item["min"], int | float):
            raise ValueError(f"{at}.min must be a number, got {item['min']!r}")
        statistic = item.get("statistic", "mean")
        if statistic not in STATISTICS:
            raise ValueError(
                f"{at}.statistic={statistic!r} is unknown; valid: {', '.join(STATISTICS)}"
            )
        conditions = item.get("conditions", [])
        conditions = [conditions] if isinstance(conditions, str) else list(conditions)
        bad = [c for c in conditions if labels is not None and c not in labels]
        if bad:
            raise ValueError(f"{at}.conditions names {bad}; valid: {list(labels or [])}")
        out.append(
            Mechanism(str(item["metric"]), float(item["min"]), tuple(conditions), statistic,
                      str(item.get("why", "")).strip())
        )  # fmt: skip
    return tuple(out)


def check(
    mechanism: Mechanism,
    records: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]],
    default_conditions: Sequence[str],
) -> MechanismCheck:
    """Measure `mechanism` in its conditions (else `default_conditions`)."""
    measured = {}
    for label in mechanism.conditions or tuple(dict.fromkeys(default_conditions)):
        values = [
            cell_statistic(cell, mechanism.metric, mechanism.statistic)
            for cell in records.get(label, {}).values()
        ]
        finite = [v for v in values if math.isfinite(v)]
        measured[label] = sum(finite) / len(finite) if finite else math.nan
    return MechanismCheck(mechanism, measured)
