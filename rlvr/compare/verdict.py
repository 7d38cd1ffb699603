"""A study's verdict from its pre-registered hypothesis (docs/comparisons.md, "Verdicts").

The hypothesis is written into the matrix file before any run: the claim, its source and
one or more predictions, each naming a metric (docs/metrics.md), how a cell's metric
history becomes one number (`statistic`), the two compared conditions and the expected
direction of treatment − control. The verdict of a prediction comes from the 95 %
Student-t interval of the per-seed paired difference d_s = S(treatment, s) − S(control, s):

- direction `greater`: replicated iff CI low > threshold; not replicated iff CI high <
  threshold; inconclusive otherwise (the interval contains the threshold).
- direction `less`: replicated iff CI high < threshold; not replicated iff CI low >
  threshold; inconclusive otherwise.
- fewer paired seeds than the pre-registered `min_seeds` (default 5): inconclusive, a
  pilot — never a verdict.

A study is replicated iff every prediction is; not replicated iff any prediction is not
replicated; inconclusive otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.eval.significance import Interval, t_interval

DIRECTIONS = ("greater", "less")
STATISTICS = ("final", "mean", "growth")
TRANSFORMS = ("none", "log10")
VERDICTS = ("replicated", "not replicated", "inconclusive")
DEFAULT_MIN_SEEDS = 5
LOG_FLOOR = 1e-6
"""log10 transform: values are floored here first, so a fraction of 0 stays finite."""
HYPOTHESIS_KEYS = {"claim", "source", "evalsize", "min_seeds", "predictions", "notes"}
PREDICTION_KEYS = {"metric", "statistic", "treatment", "control", "direction", "threshold"}
PREDICTION_KEYS |= {"transform", "why"}


@dataclass(frozen=True)
class Prediction:
    """One pre-registered, testable consequence of the claim."""

    metric: str
    treatment: str
    control: str
    direction: str
    statistic: str = "final"
    threshold: float = 0.0
    transform: str = "none"
    why: str = ""

    def __post_init__(self) -> None:
        for name, value, valid in (
            ("direction", self.direction, DIRECTIONS),
            ("statistic", self.statistic, STATISTICS),
            ("transform", self.transform, TRANSFORMS),
        ):
            if value not in valid:
                raise ValueError(
                    f"hypothesis prediction {name}={value!r} is unknown; valid: {', '.join(valid)}"
                )
        if self.treatment == self.control:
            raise ValueError(f"treatment and control are both {self.treatment!r}")

    def describe(self) -> str:
        value = f"{self.statistic}({self.metric})"
        if self.transform != "none":
            value = f"{self.transform} {value}"
        sign = ">" if self.direction == "greater" else "<"
        return f"{value}: {self.treatment} − {self.control} {sign} {self.threshold:g}"


@dataclass(frozen=True)
class Hypothesis:
    claim: str
    source: str
    predictions: tuple[Prediction, ...]
    min_seeds: int = DEFAULT_MIN_SEEDS
    evalsize: str = ""
    notes: str = ""


def hypothesis_from_dict(data: Mapping[str, Any], labels: Sequence[str] | None = None):
    """Parse a matrix file's `hypothesis:` mapping; conditions must be matrix labels."""
    if not isinstance(data, Mapping):
        raise ValueError(f"hypothesis must be a mapping, got {data!r}")
    unknown = sorted(set(data) - HYPOTHESIS_KEYS)
    if unknown:
        raise ValueError(f"unknown hypothesis key(s) {unknown}; valid: {sorted(HYPOTHESIS_KEYS)}")
    for key in ("claim", "source", "predictions"):
        if not data.get(key):
            raise ValueError(f"hypothesis.{key} is required")
    predictions = []
    for i, raw in enumerate(data["predictions"]):
        bad = sorted(set(raw) - PREDICTION_KEYS)
        if bad:
            raise ValueError(
                f"hypothesis.predictions[{i}]: unknown key(s) {bad}; valid: {sorted(PREDICTION_KEYS)}"
            )
        missing = sorted({"metric", "treatment", "control", "direction"} - set(raw))
        if missing:
            raise ValueError(f"hypothesis.predictions[{i}] needs {missing}")
        prediction = Prediction(**raw)
        for side in (prediction.treatment, prediction.control):
            if labels is not None and side not in labels:
                raise ValueError(
                    f"hypothesis.predictions[{i}] names condition {side!r}; valid: {list(labels)}"
                )
        predictions.append(prediction)
    min_seeds = data.get("min_seeds", DEFAULT_MIN_SEEDS)
    if isinstance(min_seeds, bool) or not isinstance(min_seeds, int) or min_seeds < 2:
        raise ValueError(f"hypothesis.min_seeds must be an integer ≥ 2, got {min_seeds!r}")
    return Hypothesis(
        claim=str(data["claim"]).strip(),
        source=str(data["source"]).strip(),
        predictions=tuple(predictions),
        min_seeds=min_seeds,
        evalsize=str(data.get("evalsize", "")).strip(),
        notes=str(data.get("notes", "")).strip(),
    )


def cell_statistic(records: Sequence[Mapping[str, Any]], metric: str, statistic: str) -> float:
    """One number from a cell's per-step records (`metrics.jsonl`).

    final: the last logged value (any step, so an eval-only metric works);
    mean: the mean over training steps (step ≥ 1) that logged it;
    growth: the mean over the last quarter of those steps minus the mean over the first
    quarter (at least one step each). NaN when the metric was never logged.
    """
    if statistic == "final":
        values = [r[metric] for r in records if metric in r]
        return float(values[-1]) if values else math.nan
    values = [float(r[metric]) for r in records if metric in r and r.get("step", 0) >= 1]
    if not values:
        return math.nan
    if statistic == "mean":
        return sum(values) / len(values)
    quarter = max(1, len(values) // 4)
    return sum(values[-quarter:]) / quarter - sum(values[:quarter]) / quarter


def _transform(value: float, transform: str) -> float:
    return math.log10(max(value, LOG_FLOOR)) if transform == "log10" else value


@dataclass(frozen=True)
class PredictionVerdict:
    prediction: Prediction
    verdict: str
    reason: str
    differences: dict[int, float] = field(default_factory=dict)
    interval: Interval | None = None


def judge_prediction(
    prediction: Prediction,
    records: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]],
    min_seeds: int = DEFAULT_MIN_SEEDS,
) -> PredictionVerdict:
    """`records[label][seed]` is a cell's metrics.jsonl; see the module docstring."""
    p = prediction

    def stat(label: str, seed: int) -> float:
        value = cell_statistic(records[label][seed], p.metric, p.statistic)
        return _transform(value, p.transform)

    seeds = sorted(set(records.get(p.treatment, {})) & set(records.get(p.control, {})))
    diffs = {s: stat(p.treatment, s) - stat(p.control, s) for s in seeds}
    diffs = {s: d for s, d in diffs.items() if math.isfinite(d)}
    if len(diffs) < 2:
        reason = f"{len(diffs)} paired seed(s) logged {p.metric}; a CI needs ≥ 2"
        return PredictionVerdict(p, "inconclusive", reason, diffs)
    interval = t_interval(list(diffs.values()))
    ci = f"Δ = {interval.mean:.4g}, 95 % CI [{interval.low:.4g}, {interval.high:.4g}]"
    if len(diffs) < min_seeds:
        reason = f"pilot: {len(diffs)} of the {min_seeds} pre-registered seeds; {ci}"
        return PredictionVerdict(p, "inconclusive", reason, diffs, interval)
    above, below = interval.low > p.threshold, interval.high < p.threshold
    if p.direction == "greater":
        verdict = "replicated" if above else "not replicated" if below else "inconclusive"
    else:
        verdict = "replicated" if below else "not replicated" if above else "inconclusive"
    where = "above" if above else "below" if below else "contains"
    return PredictionVerdict(p, verdict, f"{ci} ({where} {p.threshold:g})", diffs, interval)


def study_verdict(verdicts: Sequence[PredictionVerdict]) -> str:
    """replicated iff every prediction is; not replicated iff any is not; else inconclusive."""
    outcomes = [v.verdict for v in verdicts]
    if outcomes and all(o == "replicated" for o in outcomes):
        return "replicated"
    if "not replicated" in outcomes:
        return "not replicated"
    return "inconclusive"


def judge(hypothesis: Hypothesis, records) -> tuple[str, list[PredictionVerdict]]:
    """The study's verdict and each prediction's."""
    verdicts = [judge_prediction(p, records, hypothesis.min_seeds) for p in hypothesis.predictions]
    return study_verdict(verdicts), verdicts


def verdict_section(hypothesis: Hypothesis, records) -> str:
    """The report's "Verdict" section in Markdown."""
    overall, verdicts = judge(hypothesis, records)
    lines = [
        f"**Claim.** {hypothesis.claim}",
        f"**Source.** {hypothesis.source}",
        f"**Study verdict: {overall}** (rule: docs/comparisons.md, Verdicts; ≥ "
        f"{hypothesis.min_seeds} paired seeds pre-registered).",
        "",
        "| prediction (pre-registered) | seeds | Δ per seed | verdict | why |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        per_seed = ", ".join(f"{s}: {d:.4g}" for s, d in v.differences.items()) or "–"
        lines.append(
            f"| {v.prediction.describe()} | {len(v.differences)} | {per_seed} | "
            f"{v.verdict} | {v.reason} |"
        )
    if hypothesis.evalsize:
        lines += ["", f"Eval size chosen with: `{hypothesis.evalsize}`"]
    return "\n".join(lines)
