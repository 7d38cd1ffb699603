"""The logged step metrics are the numbers the update used, for filtering recipes too.

Each step: generated = trained + discarded tokens; kept ≤ candidate groups; and the
discarded rollout seconds are the discarded tokens' share of the rollout time.
"""

from __future__ import annotations

import pytest

from rlvr.train import Trainer


def _check(metrics):
    generated = metrics["rollout/generated_tokens"]
    trained = metrics["rollout/trained_tokens"]
    discarded = metrics["rollout/discarded_tokens"]
    assert generated == trained + discarded
    assert 0 <= metrics["rollout/kept_groups"] <= metrics["rollout/candidate_groups"]
    share = discarded / generated
    assert metrics["time/discarded_rollout_s"] == pytest.approx(metrics["time/rollout_s"] * share)


@pytest.mark.parametrize(
    "recipe, fields",
    [
        ("dapo", {}),
        ("scalerl", {}),  # zero-variance filter on the prepared batch
        # max_new_tokens=6 truncates most answers; the overlong filter drops them.
        ("dapo", {"overlong_filter": True, "max_new_tokens": 6, "overlong_cache": 2}),
    ],
)
def test_step_metrics_are_consistent(recipe, fields, small_config):
    trainer = Trainer(small_config(recipe=recipe, steps=2, **fields))
    steps = [trainer.train_step() for _ in range(2)]
    for metrics in steps:
        _check(metrics)
    if fields.get("overlong_filter"):
        # The filter dropped truncated rows after collection: their tokens were generated
        # and not trained, so they are discarded (the old log counted them as trained).
        assert any(m["rollout/truncated_frac"] > 0 for m in steps)
        assert all(m["rollout/discarded_tokens"] > 0 for m in steps if m["rollout/truncated_frac"])
