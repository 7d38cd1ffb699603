"""`sampler_lag: k` (rlvr/train/sampler/lag.py): the engine samples from the policy of k
updates ago, the lag shows in the mismatch metrics, and a resumed run samples as the
uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from resume_testlib import trained_and_saved
from rounding_testlib import logprob_atol

from rlvr.train.loop import Trainer
from rlvr.train.run import _restore
from rlvr.train.sampler.lag import find_lagged

NO_PROBE = {"sync_probe": False}


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_sampler_holds_the_weights_of_k_updates_ago(small_config):
    trainer = Trainer(small_config(steps=4, sampler_lag=2, lr=1e-3, **NO_PROBE))
    lagged = find_lagged(trainer.engine)
    versions = [_weights(trainer.model)]  # v0, v1, ... the policy after each update
    lags = []
    for _ in range(4):
        assert _equal(_weights(lagged.sampler_model), versions[max(0, len(versions) - 3)])
        metrics = trainer.train_step()
        trainer.step += 1
        lags.append(metrics["async/lag_max"])
        versions.append(_weights(trainer.model))
    assert lags == [0.0, 1.0, 2.0, 2.0]  # v0 at steps 1–3, then v1 at step 4
    assert not _equal(versions[1], versions[0])  # the updates moved the weights


def test_the_lag_shows_in_the_mismatch_metrics(small_config):
    def k3_at_step_3(lag: int) -> float:
        trainer = Trainer(small_config(steps=3, sampler_lag=lag, lr=1e-3, **NO_PROBE))
        for _ in range(3):
            metrics = trainer.train_step()
            trainer.step += 1
        return metrics["rollout/mismatch_k3"], logprob_atol(trainer.model.config)

    # Lag 0: the sampler's and the trainer's log-probs of one policy differ by rounding,
    # |x| ≤ τ (rounding_testlib.py), so k3 = e^x − 1 − x ≤ x² ≤ τ²; one update behind, the
    # policy has moved by more than rounding.
    (in_sync, tau), (behind, _) = k3_at_step_3(0), k3_at_step_3(1)
    assert in_sync <= tau**2 < behind


def test_a_resumed_run_samples_as_the_uninterrupted_one(small_config, tmp_path):
    cfg = small_config(steps=4, sampler_lag=2, lr=1e-3, **NO_PROBE)
    first, saved = trained_and_saved(cfg, 2, tmp_path / "ckpt")
    resumed = Trainer(cfg)
    _restore(resumed, saved)
    mine, theirs = find_lagged(resumed.engine), find_lagged(first.engine)
    assert _equal(_weights(mine.sampler_model), _weights(theirs.sampler_model))
    assert len(mine.versions) == len(theirs.versions) == 3
    drop_time = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}  # noqa: E731
    for _ in range(2):
        assert drop_time(resumed.train_step()) == drop_time(first.train_step())
        resumed.step += 1
        first.step += 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sampler_lag": -1}, "sampler_lag must be ≥ 0"),
        ({"sampler_lag": 1, "rollout_actors": 1}, "sampler_lag=1 lags the in-process hf"),
        ({"sampler_lag": 1, "rollout_engine": "vllm"}, "sampler_lag=1 lags.*rollout_engine='vllm'"),
    ],
)
def test_a_lag_that_cannot_act_is_refused(small_config, change, message):
    with pytest.raises(ValueError, match=message):
        small_config(**change)


def test_the_sync_probe_is_off_with_a_warning(small_config):
    with pytest.warns(UserWarning, match="sync_probe is off with sampler_lag=1"):
        trainer = Trainer(small_config(steps=1, sampler_lag=1))
    assert trainer.sync_probe is None
