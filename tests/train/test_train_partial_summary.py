"""An interrupted run's summary.partial.json has no `final` block: the trial's read as a
final evaluation though it repeated step 0's (issue 40). An evaluation after step 0 is
`last_eval`, with its step."""

from __future__ import annotations

from rlvr.train.run import partial

SUMMARY = {
    "status": "interrupted",
    "steps": 7,
    "initial": {"eval/accuracy": 0.005},
    "final": {"eval/accuracy": 0.005},  # what _summary takes from the last evaluation
    "final_eval_items": [0.0, 1.0],
    "generated_tokens": 100,
}


def test_only_the_step_0_evaluation_ran():
    summary = partial(SUMMARY, [(0, {"eval/accuracy": 0.005})])
    assert "final" not in summary and "final_eval_items" not in summary
    assert "last_eval" not in summary
    assert summary["initial"] == {"eval/accuracy": 0.005} and summary["steps"] == 7
    assert summary["status"] == "interrupted" and summary["generated_tokens"] == 100


def test_a_later_evaluation_is_the_last_one_with_its_step():
    evals = [(0, {"eval/accuracy": 0.005}), (4, {"eval/accuracy": 0.25})]
    summary = partial({**SUMMARY, "final": evals[-1][1]}, evals)
    assert "final" not in summary
    assert summary["last_eval"] == {"step": 4, "eval/accuracy": 0.25}
    assert summary["last_eval_items"] == [0.0, 1.0]
