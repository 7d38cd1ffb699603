"""rollout/mismatch_* in a training step: a sampler whose log-probs are all 0.1 above the
policy's gives the hand-worked values, the same for any micro-batch size (the maximum is
merged as a maximum, the means as ratios of sums), with or without a correction."""

from __future__ import annotations

import math

import pytest

from rlvr.train.loop import Trainer

SHIFT = 0.1


def _step(config) -> dict[str, float]:
    trainer = Trainer(config)
    generate = trainer.engine.generate_ids

    def shifted(prompts, params, generator):
        gen = generate(prompts, params, generator)
        gen.sampler_logprobs = gen.sampler_logprobs + SHIFT * gen.response_mask
        return gen

    trainer.engine.generate_ids = shifted
    return trainer.train_step()


def test_mismatch_metrics_by_hand_for_any_micro_batch(small_config):
    # log ρ = log π_old − log π_sampler = −0.1 on every trained token (+ float32 noise):
    # k1 = 0.1, k3 = e^−0.1 − 1 + 0.1 = 0.0048374, max |log ρ| = 0.1, ρ = 0.905 ∈ [0.5, 2]
    whole = _step(small_config(steps=1, sync_probe=False))
    split = _step(small_config(steps=1, sync_probe=False, micro_batch_size=3))
    k3 = math.exp(-SHIFT) - 1 + SHIFT
    for m in (whole, split):
        assert m["rollout/mismatch_k1"] == pytest.approx(SHIFT, abs=1e-5)
        assert m["rollout/mismatch_k3"] == pytest.approx(k3, abs=1e-5)
        assert m["rollout/mismatch_max_abs_log_ratio"] == pytest.approx(SHIFT, abs=1e-4)
        assert m["rollout/mismatch_frac_outside_band"] == 0.0
        # Σ over a response of 0.1 per token: 0.1 × the mean trained length
        length = m["rollout/trained_tokens"] / (m["rollout/kept_groups"] * 4)
        assert m["rollout/mismatch_seq_k1"] == pytest.approx(SHIFT * length, rel=1e-3)
    for key in [k for k in whole if k.startswith("rollout/mismatch")]:
        assert split[key] == pytest.approx(whole[key], abs=1e-6), key


def test_the_band_follows_the_correction(small_config):
    """rc_upper 1.05 with token_mis (no lower bound: the metric's band is [1/1.05, 1.05]):
    ρ = 0.905 lies outside on every token."""
    m = _step(small_config(steps=1, rollout_correction="token_mis", rc_upper=1.05))
    assert m["rollout/mismatch_frac_outside_band"] == 1.0


def test_episodes_and_the_fake_vllm_engine_report_the_mismatch(tmp_path):
    """Multi-turn episodes (observation tokens in the response) and the vLLM engine's fake
    backend: the sampler's log-probs reach the loss and the metrics are logged, near 0
    (the fake serves the same float32 weights; observations are not in the mask)."""
    import sys
    from pathlib import Path

    from local_model import local_trainer

    sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # fake_vllm:make_fake
    echo = {
        "environment": "user_envs:Echo",
        "episode": {"max_turns": 4, "max_turn_tokens": 3},
        "max_new_tokens": 24,
    }
    fake = {"rollout_engine": "vllm", "engine_options": {"backend_factory": "fake_vllm:make_fake"}}
    for extra, engine in ((echo, "HFEngine"), (fake, "VLLMEngine")):
        trainer = local_trainer(tmp_path / engine, **extra)
        assert type(trainer.engine).__name__ == engine
        metrics = trainer.train_step()
        assert metrics["rollout/mismatch_max_abs_log_ratio"] < 1e-3
        assert abs(metrics["rollout/mismatch_k1"]) < 1e-5
