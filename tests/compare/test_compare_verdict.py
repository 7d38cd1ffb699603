"""Verdicts from a pre-registered hypothesis on synthetic results whose answer is known."""

import math

import numpy as np
import pytest

from rlvr.compare.matrix import spec_from_dict
from rlvr.compare.stats import holm, joint_bootstrap_test, t_test
from rlvr.compare.verdict import (
    Prediction,
    apply_holm,
    cell_statistic,
    hypothesis_from_dict,
    judge,
    judge_prediction,
    study_verdict,
)
from rlvr.compare.verdict_report import margin_lines, study_set_section, verdict_section
from rlvr.eval.significance import evalsize

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
    # metrics.jsonl writes a non-finite value as null: the statistic is NaN, not a crash
    broken = [*records, {"step": 9, "m": None, "eval/a": None}]
    assert math.isnan(cell_statistic(broken, "m", "mean"))
    assert math.isnan(cell_statistic(broken, "eval/a", "final"))


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


# --- manipulation checks, implementation checks, joint bootstrap, Holm (issue 32) --------


def _with_activity(records, metric="clip/high_frac", treatment=0.02, control=0.02):
    """Every cell also logs an activity metric (one training step)."""
    for label, value in (("t", treatment), ("c", control)):
        for cell in records[label].values():
            cell.append({"step": 2, metric: value})
    return records


def _hypothesis(predictions, **extra):
    return hypothesis_from_dict({**HYPOTHESIS, "predictions": predictions, **extra}, ["t", "c"])


UP_PREDICTION = {"metric": "m", "treatment": "t", "control": "c", "direction": "greater"}


def test_idle_mechanism_cannot_be_tested_never_a_verdict():
    # Δ is clearly positive (UP), but the upper clip acts on 0.0005 of tokens < 0.01.
    records = _with_activity(_records(UP), treatment=0.0005, control=0.0005)
    mechanism = {"metric": "clip/high_frac", "min": 0.01, "conditions": ["c"]}
    hypothesis = _hypothesis([UP_PREDICTION], mechanism=mechanism)
    overall, (verdict,) = judge(hypothesis, records)
    assert overall == "cannot be tested here" and verdict.verdict == "cannot be tested here"
    assert verdict.reason.startswith("measured mean(clip/high_frac) c 0.0005 < threshold 0.01")
    section = verdict_section(hypothesis, records)
    assert "**Study verdict: cannot be tested here**" in section
    assert "✘ cannot be tested here: mean(clip/high_frac) ≥ 0.01 in c" in section
    # The same data with the mechanism acting (0.02 ≥ 0.01) is judged as before.
    active = _with_activity(_records(UP))
    assert judge(hypothesis, active)[0] == "replicated"
    # A never-logged activity metric fails the check too.
    absent = _hypothesis([UP_PREDICTION], mechanism={"metric": "nowhere", "min": 0.0})
    assert judge(absent, _records(UP))[1][0].reason.startswith("measured mean(nowhere) t never")


def test_a_prediction_level_check_gates_only_its_prediction():
    gated = {**UP_PREDICTION, "mechanism": {"metric": "clip/high_frac", "min": 0.5}}
    hypothesis = _hypothesis([gated, UP_PREDICTION])
    _, (first, second) = judge(hypothesis, _with_activity(_records(UP)))
    assert first.verdict == "cannot be tested here" and second.verdict == "replicated"


def test_implementation_checks_are_reported_apart_and_never_counted():
    identity = {**UP_PREDICTION, "kind": "implementation_check"}
    flat = {**UP_PREDICTION, "metric": "f"}
    records = _records(UP)
    for s, d in enumerate(FLAT):
        records["t"][s].append({"step": 1, "f": d})
        records["c"][s].append({"step": 1, "f": 0.0})
    overall, verdicts = judge(_hypothesis([identity, flat]), records)
    assert [v.verdict for v in verdicts] == ["replicated", "inconclusive"]
    assert overall == "inconclusive"  # the identity's success does not count
    only = _hypothesis([identity])
    assert judge(only, _records(UP))[0] == "no replication prediction (implementation checks only)"
    section = verdict_section(_hypothesis([identity, flat]), records)
    checks = section.split("**Implementation checks**")[1]
    assert "final(m): t − c > 0" in checks and "final(f)" not in checks


def _item_records(per_item_diffs, seeds=5):
    """Per-item correctness: control 0 on every item, treatment = the item's difference
    (the same on every seed), and the matching final eval/accuracy records."""
    t_items = [float(d) for d in per_item_diffs]
    c_items = [0.0] * len(t_items)
    mean = sum(t_items) / len(t_items)
    records = {
        "t": {s: [{"step": 5, "eval/accuracy": mean}] for s in range(seeds)},
        "c": {s: [{"step": 5, "eval/accuracy": 0.0}] for s in range(seeds)},
    }
    items = {"t": dict.fromkeys(range(seeds), t_items), "c": dict.fromkeys(range(seeds), c_items)}
    return records, items


def test_item_variance_widens_the_verdict_interval():
    # 11 of 20 items +1, 9 items −1: Δ = 0.1 on every seed, so over seeds alone the CI is
    # [0.1, 0.1]; resampling items too, sd ≈ 1.03, se ≈ 1.03/√20 ≈ 0.23: the 95 %
    # interval reaches about ±0.45 and contains 0.
    records, items = _item_records([1] * 11 + [-1] * 9)
    prediction = Prediction(metric="eval/accuracy", treatment="t", control="c", direction="greater")
    seeds_only = judge_prediction(prediction, records)
    assert seeds_only.verdict == "replicated" and "seeds only" in seeds_only.reason
    joint = judge_prediction(prediction, records, items=items)
    assert joint.verdict == "inconclusive" and "bootstrap over 5 seeds × 20 items" in joint.reason
    assert joint.interval.mean == pytest.approx(0.1)
    assert -0.6 < joint.interval.low < -0.2 and 0.4 < joint.interval.high < 0.8
    # Cells without per-item results fall back to the seeds, and say so.
    empty = {label: {s: [] for s in range(5)} for label in ("t", "c")}
    fallback = judge_prediction(prediction, records, items=empty)
    assert "seeds only: some cells recorded no per-item results" in fallback.reason


def test_joint_bootstrap_of_a_constant_difference_is_a_point():
    treatment = np.full((3, 4), 0.7)
    test = joint_bootstrap_test(treatment, treatment - 0.2, threshold=0.1, resamples=200)
    assert (test.interval.low, test.interval.high) == pytest.approx((0.2, 0.2))
    assert test.p_greater == 0.0 and test.p_less == 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 → 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, float("nan")])[0] == 0.5  # NaN is not counted in the family


def test_holm_turns_two_marginal_replications_inconclusive():
    # UP with θ = 0.9: t = (3 − 0.9)/0.7071 = 2.97, one-sided p = 0.0206 < 0.025 alone;
    # over a family of two both become 2·0.0206 = 0.041 > 0.025.
    p = t_test(UP, 0.9).p_greater
    assert p == pytest.approx(0.0206, abs=5e-4)
    marginal = {**UP_PREDICTION, "threshold": 0.9}
    assert judge(_hypothesis([marginal]), _records(UP))[0] == "replicated"
    overall, verdicts = judge(_hypothesis([marginal, {**marginal}]), _records(UP))
    assert overall == "inconclusive"
    assert [v.holm_p for v in verdicts] == pytest.approx([2 * p, 2 * p])
    assert "Holm-adjusted p = 0.0412 (family of 2)" in verdicts[0].reason


def test_study_set_applies_holm_over_all_studies():
    marginal = {**UP_PREDICTION, "threshold": 0.9}
    study = ("s", _hypothesis([marginal]), _records(UP), None)
    alone = study_set_section([study])
    assert "| s | replicated |" in alone
    both = study_set_section([study, ("s2", *study[1:])])
    assert "| s | inconclusive |" in both and "Holm-corrected over the 2 testable" in both


def test_margin_lines_use_evalsize_for_the_preregistered_margin():
    margin = {**UP_PREDICTION, "metric": "eval/accuracy", "threshold": -0.05}
    lines = margin_lines(_hypothesis([margin]), items=200, accuracy=0.6)
    needed = evalsize(0.6, 0.05)
    assert lines == [
        f"- margin 0.05 on eval/accuracy: `rlvr evalsize --baseline 0.60 --delta 0.05` → "
        f"{needed:,} items per condition; 200 used (too few: a single run cannot resolve the margin)."
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "identity"}, "kind='identity' is unknown"),
        ({"mechanism": {"metric": "x"}}, r"predictions\[0\].mechanism needs \['min'\]"),
        ({"mechanism": {"metric": "x", "min": 0, "conditions": ["z"]}}, "names \\['z'\\]"),
        ({"mechanism": {"metric": "x", "min": "high"}}, "min must be a number"),
    ],
)
def test_bad_checks_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        _hypothesis([{**UP_PREDICTION, **change}])


def test_apply_holm_leaves_pilots_and_gated_predictions_out_of_the_family():
    pilot = judge_prediction(_greater(), _records([1.0, 2.0]), min_seeds=5)
    full = judge_prediction(_greater(), _records(UP))
    adjusted = apply_holm([pilot, full])
    assert adjusted[1].family == 1 and adjusted[0].holm_p is None
