"""Held-out evaluation samples with the configured top_p, as training does (issue 9)."""

from __future__ import annotations

from local_model import local_trainer

from rlvr.eval.evaluate import GREEDY_TOP_P


def test_evaluation_uses_the_configured_top_p(tmp_path):
    trainer = local_trainer(tmp_path, top_p=0.5, temperature=0.7, eval_samples=2)
    seen = []
    real = trainer.engine.generate

    def spy(prompts, params, generator):
        seen.append((params.top_p, params.temperature, params.group_size))
        return real(prompts, params, generator)

    trainer.engine.generate = spy
    trainer.evaluate()
    # One sampled pass at the training settings, one greedy pass (near-zero top_p).
    assert seen == [(0.5, 0.7, 2), (GREEDY_TOP_P, 1.0, 1)]
