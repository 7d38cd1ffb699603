"""rollout/mismatch_* in a training step: a sampler whose log-probs are all 0.1 above the
policy's gives the hand-worked values, the same for any micro-batch size (the maximum is
merged as a maximum, the means as ratios of sums), with or without a correction."""

from __future__ import annotations

import math

import pytest
from rounding_testlib import logprob_atol

from rlvr.train.loop import Trainer

SHIFT = 0.1


def _step(config) -> tuple[dict[str, float], float]:
    """One training step's metrics, and τ for its model (rounding_testlib.logprob_atol)."""
    trainer = Trainer(config)
    generate = trainer.engine.generate_ids

    def shifted(prompts, params, generator):
        gen = generate(prompts, params, generator)
        gen.sampler_logprobs = gen.sampler_logprobs + SHIFT * gen.response_mask
        return gen

    trainer.engine.generate_ids = shifted
    return trainer.train_step(), logprob_atol(trainer.model.config)


def test_mismatch_metrics_by_hand_for_any_micro_batch(small_config):
    # log ρ = log π_old − log π_sampler = −0.1 on every trained token, up to τ: the trainer's
    # forward and the sampler's decode add in other orders (τ = logprob_atol, 1.1e-2 for
    # the embedded model, rounding_testlib.py). k1 = 0.1, k3 = e^−0.1 − 1 + 0.1 = 0.0048374
    # (its slope |e^x − 1| ≤ 1 − e^(−0.1−τ) within τ), max |log ρ| = 0.1, ρ = 0.905, inside
    # [0.5, 2] by far more than τ, so no token is outside the band, on any CPU.
    whole, tau = _step(small_config(steps=1, sync_probe=False))
    split, _ = _step(small_config(steps=1, sync_probe=False, micro_batch_size=3))
    k3, k3_slope = math.exp(-SHIFT) - 1 + SHIFT, 1 - math.exp(-SHIFT - tau)
    for m in (whole, split):
        assert m["rollout/mismatch_k1"] == pytest.approx(SHIFT, abs=tau)
        assert m["rollout/mismatch_k3"] == pytest.approx(k3, abs=k3_slope * tau)
        assert m["rollout/mismatch_max_abs_log_ratio"] == pytest.approx(SHIFT, abs=tau)
        assert m["rollout/mismatch_frac_outside_band"] == 0.0
        # Σ over a response of 0.1 per token: 0.1 × the mean trained length (τ per token)
        length = m["rollout/trained_tokens"] / (m["rollout/kept_groups"] * 4)
        assert m["rollout/mismatch_seq_k1"] == pytest.approx(SHIFT * length, abs=length * tau)
    # The same rollout (same seed and sampler) on both sides: only π_old's forward differs,
    # by ≤ τ per token, so means and the maximum move by ≤ τ, a response's sum by ≤ 14·τ
    # (max_new_tokens), k3 by ≤ its slope × τ (adding 0.1 to the sampler's log-probs rounds
    # the same on both sides); a statistic added up over the 6 micro-batches rather than
    # merged would be off by a multiple of itself.
    bounds = {"k1": tau, "k3": k3_slope * tau, "max_abs_log_ratio": tau, "seq_k1": 14 * tau}
    bounds["frac_outside_band"] = 0.0
    assert {f"rollout/mismatch_{k}" for k in bounds} == {k for k in whole if "mismatch" in k}
    for key, bound in bounds.items():
        key = f"rollout/mismatch_{key}"
        assert split[key] == pytest.approx(whole[key], abs=bound), key


def test_the_band_follows_the_correction(small_config):
    """rc_upper 1.05 with token_mis (no lower bound: the metric's band is [1/1.05, 1.05]):
    ρ = 0.905 lies outside on every token (|log ρ| = 0.1 ± τ > log 1.05 = 0.049 by far more
    than τ = 1.1e-2: on any CPU)."""
    m, _ = _step(small_config(steps=1, rollout_correction="token_mis", rc_upper=1.05))
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
        # Same weights; the sampler's forward adds in another order than the trainer's:
        # |log ρ| ≤ τ per token, so its mean too (rounding_testlib.py).
        tau = logprob_atol(trainer.model.config)
        assert metrics["rollout/mismatch_max_abs_log_ratio"] <= tau
        assert abs(metrics["rollout/mismatch_k1"]) <= tau
