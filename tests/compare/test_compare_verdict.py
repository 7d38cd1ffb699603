"""Verdicts from a pre-registered hypothesis on synthetic results whose answer is known."""

import math

import pytest

from rlvr.compare.matrix import spec_from_dict
from rlvr.compare.verdict import (
    Prediction,
    cell_statistic,
    hypothesis_from_dict,
    judge,
    judge_prediction,
    study_verdict,
)
from rlvr.compare.verdict_report import verdict_section

# t_{0.975, 4} = 2.7764. Differences 1..5: mean 3, s = √2.5 = 1.5811, s/√5 = 0.7071,
# half-width 2.7764 · 0.7071 = 1.9632 → CI [1.0368, 4.9632].
UP = [1.0, 2.0, 3.0, 4.0, 5.0]
DOWN = [-d for d in UP]  # CI [−4.9632, −1.0368]
FLAT = [-2.0, -1.0, 0.0, 1.0, 2.0]  # mean 0, CI [−1.9632, 1.9632]


def _records(diffs, metric="m", base=10.0):
    """Control logs `base` for every seed; treatment logs base + d_s (one record each)."""
    return {
        "t": {s: [{"step": 1, metric: base + d}] for s, d in enumerate(diffs)},
        "c": {s: [{"step": 1, metric: base}] for s in range(len(diffs))},
    }


def _greater(**kw):
    return Prediction(metric="m", treatment="t", control="c", direction="greater", **kw)


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [(UP, "replicated"), (DOWN, "not replicated"), (FLAT, "inconclusive")],
)
def test_greater_gives_all_three_outcomes(diffs, expected):
    verdict = judge_prediction(_greater(), _records(diffs))
    assert verdict.verdict == expected
    assert verdict.interval.n == 5


def test_interval_is_the_hand_worked_t_interval():
    interval = judge_prediction(_greater(), _records(UP)).interval
    assert interval.mean == pytest.approx(3.0)
    assert interval.low == pytest.approx(1.0368, abs=1e-4)
    assert interval.high == pytest.approx(4.9632, abs=1e-4)


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [(DOWN, "replicated"), (UP, "not replicated"), (FLAT, "inconclusive")],
)
def test_less_mirrors_greater(diffs, expected):
    prediction = Prediction(metric="m", treatment="t", control="c", direction="less")
    assert judge_prediction(prediction, _records(diffs)).verdict == expected


def test_threshold_inside_the_interval_is_inconclusive():
    # CI [1.04, 4.96] contains 2: the effect is real but not shown to exceed 2.
    assert judge_prediction(_greater(threshold=2.0), _records(UP)).verdict == "inconclusive"
    # Non-inferiority: greater than −1 with FLAT's CI [−1.96, 1.96] is undecided, with UP's
    # it is replicated.
    assert judge_prediction(_greater(threshold=-1.0), _records(FLAT)).verdict == "inconclusive"
    assert judge_prediction(_greater(threshold=-1.0), _records(UP)).verdict == "replicated"


def test_fewer_seeds_than_preregistered_is_a_pilot_never_a_verdict():
    verdict = judge_prediction(_greater(), _records([10.0, 11.0]), min_seeds=5)
    assert verdict.verdict == "inconclusive" and verdict.reason.startswith("pilot: 2 of the 5")
    one = judge_prediction(_greater(), _records([10.0]), min_seeds=5)
    assert one.verdict == "inconclusive" and "a CI needs ≥ 2" in one.reason


def test_statistics_by_hand():
    records = [{"step": 0, "eval/a": 0.1}] + [{"step": s, "m": float(s)} for s in range(1, 9)]
    records.append({"step": 8, "eval/a": 0.4})
    assert cell_statistic(records, "eval/a", "final") == 0.4
    assert cell_statistic(records, "m", "mean") == 4.5  # (1 + … + 8) / 8
    # 8 steps: quarter = 2; mean(7, 8) − mean(1, 2) = 7.5 − 1.5 = 6.
    assert cell_statistic(records, "m", "growth") == 6.0
    assert math.isnan(cell_statistic(records, "absent", "final"))


def test_log10_transform_compares_orders_of_magnitude():
    # 0.1 vs 0.001 is 2 orders of magnitude on every seed: Δ = 2 exactly, CI [2, 2].
    records = {
        "t": {s: [{"step": 1, "m": 0.1}] for s in range(5)},
        "c": {s: [{"step": 1, "m": 0.001}] for s in range(5)},
    }
    verdict = judge_prediction(_greater(transform="log10", threshold=1.0), records)
    assert verdict.verdict == "replicated"
    assert verdict.interval.mean == pytest.approx(2.0)


def test_study_verdict_combines_predictions():
    r = judge_prediction(_greater(), _records(UP))
    n = judge_prediction(_greater(), _records(DOWN))
    i = judge_prediction(_greater(), _records(FLAT))
    assert study_verdict([r, r]) == "replicated"
    assert study_verdict([r, i]) == "inconclusive"
    assert study_verdict([r, n, i]) == "not replicated"


HYPOTHESIS = {
    "claim": "t raises m",
    "source": "a paper, Fig. 1",
    "predictions": [{"metric": "m", "treatment": "t", "control": "c", "direction": "greater"}],
}


def test_hypothesis_round_trip_and_section():
    hypothesis = hypothesis_from_dict(HYPOTHESIS, ["t", "c"])
    overall, _ = judge(hypothesis, _records(UP))
    assert overall == "replicated"
    section = verdict_section(hypothesis, _records(UP))
    assert "**Study verdict: replicated**" in section and "final(m): t − c > 0" in section


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"predictions": [{**HYPOTHESIS["predictions"][0], "direction": "up"}]}, "direction='up'"),
        ({"predictions": [{**HYPOTHESIS["predictions"][0], "control": "x"}]}, "condition 'x'"),
        ({"source": ""}, "hypothesis.source is required"),
        ({"min_seeds": 1}, "min_seeds must be an integer ≥ 2"),
        ({"typo": 1}, "unknown hypothesis key"),
    ],
)
def test_bad_hypotheses_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        hypothesis_from_dict({**HYPOTHESIS, **change}, ["t", "c"])


def test_matrix_validates_and_keeps_its_hypothesis():
    data = {
        "recipes": ["grpo", "dr_grpo"],
        "hypothesis": {
            **HYPOTHESIS,
            "predictions": [
                {"metric": "m", "treatment": "grpo", "control": "dr_grpo", "direction": "less"}
            ],
        },
    }
    spec = spec_from_dict(data)
    assert spec.to_dict()["hypothesis"] == data["hypothesis"]
    with pytest.raises(ValueError, match="names condition 't'"):
        spec_from_dict({"recipes": ["grpo", "dr_grpo"], "hypothesis": HYPOTHESIS})
