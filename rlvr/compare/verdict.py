"""A study's verdict from its pre-registered hypothesis (docs/comparisons.md, "Verdicts").

The hypothesis is written into the matrix file before any run: the claim, its source and
one or more predictions, each naming a metric (docs/metrics.md), how a cell's metric
history becomes one number (`statistic`), the two compared conditions and the expected
direction of treatment − control. Per paired seed d_s = S(treatment, s) − S(control, s);
the test of Δ against the threshold θ (rlvr/compare/stats.py) is

- a two-level bootstrap over seeds and eval items jointly, for `final(eval/accuracy)`
  when every paired cell recorded its per-item results;
- otherwise a Student t over the per-seed differences (labelled "seeds only").

direction `greater`: replicated iff H₀ Δ ≤ θ is rejected (one-sided α = 0.025: the 95 %
interval lies above θ); not replicated iff H₀ Δ ≥ θ is rejected; inconclusive otherwise
(`less` mirrors it). The p-values are Holm-corrected over the family of testable
replication predictions before the rule is applied. Fewer paired seeds than `min_seeds`
(default 5) is a pilot, inconclusive. A prediction whose manipulation check fails
(rlvr/compare/mechanism.py) "cannot be tested here"; a prediction of `kind:
implementation_check` (true by construction) is reported apart and never counted.

A study cannot be tested here iff any manipulation check fails; otherwise it is
replicated iff every replication prediction is, not replicated iff any is not,
inconclusive otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rlvr.compare.mechanism import Mechanism, MechanismCheck, check, mechanisms_from
from rlvr.compare.stats import (
    ALPHA_ONE_SIDED,
    Test,
    cell_statistic,
    holm,
    joint_bootstrap_test,
    t_test,
)
from rlvr.eval.significance import Interval

__all__ = ["Hypothesis", "Prediction", "cell_statistic", "hypothesis_from_dict", "judge"]

DIRECTIONS = ("greater", "less")
STATISTICS = ("final", "mean", "growth")
TRANSFORMS = ("none", "log10")
KINDS = ("replication", "implementation_check")
VERDICTS = ("replicated", "not replicated", "inconclusive", "cannot be tested here")
DEFAULT_MIN_SEEDS = 5
LOG_FLOOR = 1e-6
"""log10 transform: values are floored here first, so a fraction of 0 stays finite."""
HYPOTHESIS_KEYS = {"claim", "source", "evalsize", "min_seeds", "predictions", "notes"}
HYPOTHESIS_KEYS |= {"mechanism"}
PREDICTION_KEYS = {"metric", "statistic", "treatment", "control", "direction", "threshold"}
PREDICTION_KEYS |= {"transform", "why", "kind", "mechanism"}
ITEM_METRIC = "eval/accuracy"  # the one metric recorded per eval item (summary.json)


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
    kind: str = "replication"
    mechanisms: tuple[Mechanism, ...] = ()

    def __post_init__(self) -> None:
        for name, value, valid in (
            ("direction", self.direction, DIRECTIONS),
            ("statistic", self.statistic, STATISTICS),
            ("transform", self.transform, TRANSFORMS),
            ("kind", self.kind, KINDS),
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
    mechanisms: tuple[Mechanism, ...] = ()  # gate every replication prediction


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
    predictions = [_prediction(i, raw, labels) for i, raw in enumerate(data["predictions"])]
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
        mechanisms=mechanisms_from(data.get("mechanism"), "hypothesis", labels),
    )


def _prediction(i: int, raw: Any, labels: Sequence[str] | None) -> Prediction:
    where = f"hypothesis.predictions[{i}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    bad = sorted(set(raw) - PREDICTION_KEYS)
    if bad:
        raise ValueError(f"{where}: unknown key(s) {bad}; valid: {sorted(PREDICTION_KEYS)}")
    missing = sorted({"metric", "treatment", "control", "direction"} - set(raw))
    if missing:
        raise ValueError(f"{where} needs {missing}")
    values = {k: v for k, v in raw.items() if k != "mechanism"}
    prediction = Prediction(
        **values, mechanisms=mechanisms_from(raw.get("mechanism"), where, labels)
    )
    for side in (prediction.treatment, prediction.control):
        if labels is not None and side not in labels:
            raise ValueError(f"{where} names condition {side!r}; valid: {list(labels)}")
    return prediction


def _transform(value: float, transform: str) -> float:
    return math.log10(max(value, LOG_FLOOR)) if transform == "log10" else value


@dataclass(frozen=True)
class PredictionVerdict:
    prediction: Prediction
    verdict: str
    reason: str
    differences: dict[int, float] = field(default_factory=dict)
    interval: Interval | None = None
    test: Test | None = None
    checks: tuple[MechanismCheck, ...] = ()
    holm_p: float | None = None  # the Holm-adjusted p of the predicted direction
    family: int = 0  # predictions in the Holm family

    @property
    def testable(self) -> bool:
        """In the Holm family: a replication prediction with a test and no failed check."""
        return (
            self.prediction.kind == "replication"
            and self.test is not None
            and self.verdict != "cannot be tested here"
            and not self.reason.startswith("pilot")
        )


def _p_sides(v: PredictionVerdict) -> tuple[float, float]:
    """(p for the predicted direction, p against it)."""
    t = v.test
    return (
        (t.p_greater, t.p_less) if v.prediction.direction == "greater" else (t.p_less, t.p_greater)
    )


def _rule(p_for: float, p_against: float) -> str:
    if p_for < ALPHA_ONE_SIDED:
        return "replicated"
    return "not replicated" if p_against < ALPHA_ONE_SIDED else "inconclusive"


def _item_arrays(p: Prediction, items, seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | str:
    """Per-item arrays (seeds, items) of both conditions, or why there are none."""
    if p.metric != ITEM_METRIC or p.statistic != "final" or p.transform != "none":
        return f"per-item results exist for final({ITEM_METRIC}) only"
    if items is None:
        return "no per-item results were given"
    arrays = [
        [np.asarray(items.get(side, {}).get(s, []), float) for s in seeds]
        for side in (p.treatment, p.control)
    ]
    sizes = {a.size for side in arrays for a in side}
    if 0 in sizes or len(sizes) != 1:
        return "some cells recorded no per-item results (or different eval sets)"
    return np.stack(arrays[0]), np.stack(arrays[1])


def judge_prediction(
    prediction: Prediction,
    records: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]],
    min_seeds: int = DEFAULT_MIN_SEEDS,
    items: Mapping[str, Mapping[int, Sequence[float]]] | None = None,
    gates: Sequence[Mechanism] = (),
) -> PredictionVerdict:
    """The unadjusted verdict: `records[label][seed]` is a cell's metrics.jsonl,
    `items[label][seed]` its final per-item correctness; `gates` are the hypothesis's
    manipulation checks (a replication prediction's own are added)."""
    p = prediction

    def stat(label: str, seed: int) -> float:
        return _transform(cell_statistic(records[label][seed], p.metric, p.statistic), p.transform)

    seeds = sorted(set(records.get(p.treatment, {})) & set(records.get(p.control, {})))
    diffs = {s: stat(p.treatment, s) - stat(p.control, s) for s in seeds}
    diffs = {s: d for s, d in diffs.items() if math.isfinite(d)}
    mechanisms = (*gates, *p.mechanisms) if p.kind == "replication" else p.mechanisms
    checks = tuple(check(m, records, (p.treatment, p.control)) for m in mechanisms)
    if len(diffs) < 2:
        reason = f"{len(diffs)} paired seed(s) logged {p.metric}; a CI needs ≥ 2"
        return PredictionVerdict(p, "inconclusive", reason, diffs, checks=checks)
    arrays = _item_arrays(p, items, list(diffs))
    if isinstance(arrays, str):
        test = t_test(list(diffs.values()), p.threshold)
        test = replace(test, method=f"{test.method} (seeds only: {arrays})")
    else:
        test = joint_bootstrap_test(*arrays, p.threshold)
    ci = (
        f"Δ = {test.interval.mean:.4g}, 95 % CI [{test.interval.low:.4g}, {test.interval.high:.4g}]"
    )
    failed = [c for c in checks if not c.passed]
    if failed:
        reason = "; ".join(c.describe() for c in failed) + f" ({ci}, not judged)"
        return PredictionVerdict(
            p, "cannot be tested here", reason, diffs, test.interval, test, checks
        )
    if len(diffs) < min_seeds:
        reason = f"pilot: {len(diffs)} of the {min_seeds} pre-registered seeds; {ci}"
        return PredictionVerdict(p, "inconclusive", reason, diffs, test.interval, test, checks)
    verdict = _rule(*_p_sides(PredictionVerdict(p, "", "", test=test)))
    where = (
        "above"
        if test.interval.low > p.threshold
        else "below"
        if test.interval.high < p.threshold
        else "contains"
    )
    reason = f"{ci} ({where} {p.threshold:g}); {test.method}"
    return PredictionVerdict(p, verdict, reason, diffs, test.interval, test, checks)


def apply_holm(verdicts: Sequence[PredictionVerdict]) -> list[PredictionVerdict]:
    """Holm over the testable replication predictions: each side's p-values are adjusted
    over the family and the rule is applied again (a verdict can only become inconclusive)."""
    family = [i for i, v in enumerate(verdicts) if v.testable]
    sides = [_p_sides(verdicts[i]) for i in family]
    adjusted_for = holm([s[0] for s in sides])
    adjusted_against = holm([s[1] for s in sides])
    out = list(verdicts)
    for j, i in enumerate(family):
        v = verdicts[i]
        verdict = _rule(adjusted_for[j], adjusted_against[j])
        reason = v.reason + f"; Holm-adjusted p = {adjusted_for[j]:.3g} (family of {len(family)})"
        out[i] = replace(
            v, verdict=verdict, reason=reason, holm_p=adjusted_for[j], family=len(family)
        )
    return out


def study_verdict(verdicts: Sequence[PredictionVerdict]) -> str:
    """cannot be tested here iff a manipulation check failed; else replicated iff every
    replication prediction is, not replicated iff any is not, inconclusive otherwise."""
    counted = [v for v in verdicts if v.prediction.kind == "replication"]
    outcomes = [v.verdict for v in counted]
    if "cannot be tested here" in outcomes:
        return "cannot be tested here"
    if not counted:
        return "no replication prediction (implementation checks only)"
    if all(o == "replicated" for o in outcomes):
        return "replicated"
    if "not replicated" in outcomes:
        return "not replicated"
    return "inconclusive"


def judge_unadjusted(hypothesis: Hypothesis, records, items=None) -> list[PredictionVerdict]:
    return [
        judge_prediction(p, records, hypothesis.min_seeds, items, hypothesis.mechanisms)
        for p in hypothesis.predictions
    ]


def judge(hypothesis: Hypothesis, records, items=None) -> tuple[str, list[PredictionVerdict]]:
    """The study's verdict and each prediction's, Holm-corrected within the study."""
    verdicts = apply_holm(judge_unadjusted(hypothesis, records, items))
    return study_verdict(verdicts), verdicts
