"""The asynchronous Ray pipeline (rlvr/train/distributed/async_pipeline.py) on a local Ray instance with
two rollout actors on the embedded model."""

from __future__ import annotations

import os
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from rlvr.train import Trainer  # noqa: E402
from rlvr.train.distributed.async_pipeline import AsyncTrainer, RolloutActorsLost, make_trainer  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _comparable(metrics):
    return {k: v for k, v in metrics.items() if not k.startswith(("time/", "async/"))}


def _gone(pid: int, wait_s: float = 20.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("rewards", [[], ["rlvr.rewards:correctness", "user_rewards:brevity"]])
def test_lag_zero_reproduces_the_synchronous_run(local_ray, small_config, rewards):
    """DAPO (dynamic sampling refills: several rounds per step) for 2 steps: every metric
    but time is the in-process run's (the reward functions' reward/fn/* too, though the
    actors score), and the weights after them are the same."""
    # No sync probe: it is not run with rollout actors, so its metric would be one-sided.
    cfg = dict(recipe="dapo", steps=2, max_refill_rounds=2, reward_funcs=rewards, sync_probe=False)
    sync = Trainer(small_config(**cfg))
    expected = [_comparable(sync.train_step()) for _ in range(2)]
    trainer = AsyncTrainer(small_config(**cfg, rollout_actors=2, max_lag=0))
    try:
        got = [trainer.train_step() for _ in range(2)]
    finally:
        trainer.close()
    assert [_comparable(m) for m in got] == expected
    assert all(m["async/lag_max"] == 0 and m["async/dropped_rounds"] == 0 for m in got)
    for a, b in zip(sync.model.parameters(), trainer.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bounded_lag_and_a_dead_actor(local_ray, small_config):
    """max_lag=1: no consumed round is older than one version; when an actor is killed
    mid-run its round goes to the survivor and the run continues; close() leaves no actor
    process behind."""
    trainer = AsyncTrainer(small_config(steps=4, rollout_actors=2, max_lag=1, tis_cap=2.0))
    pids = list(trainer.pipeline.pids)
    try:
        history = [trainer.train_step() for _ in range(2)]
        ray.kill(trainer.pipeline.actors[0], no_restart=True)
        history += [trainer.train_step() for _ in range(2)]
        assert len(trainer.pipeline.actors) == 1
    finally:
        trainer.close()
    for m in history:
        assert m["async/lag_max"] <= 1
        assert m["async/lag_0_rounds"] + m["async/lag_1_rounds"] >= 1
        assert "rollout/mismatch_k1" in m
    # after the first step the second actor's round was sampled one version back
    assert sum(m["async/lag_1_rounds"] + m["async/dropped_rounds"] for m in history) >= 1
    assert all(_gone(pid) for pid in pids)


def test_no_live_actor_is_a_clear_error(local_ray, small_config):
    trainer = AsyncTrainer(small_config(rollout_actors=1, max_lag=1))
    try:
        ray.kill(trainer.pipeline.actors[0], no_restart=True)
        with pytest.raises(RolloutActorsLost, match="every rollout actor died"):
            trainer.train_step()
    finally:
        trainer.close()


def test_max_lag_without_actors_is_refused(small_config):
    with pytest.raises(ValueError, match="max_lag=1 needs rollout_actors ≥ 1"):
        make_trainer(small_config(max_lag=1))


def test_rlvr_train_async_resumes_like_an_uninterrupted_run(local_ray, small_config, tmp_path):
    """`run_training` with one actor at lag 0: 2 steps, then resumed to 3, logs what 3 steps
    in one go log (the sampling generator is checkpointed, the weights republished)."""
    from rlvr.runlog.logger import read_metrics
    from rlvr.train import run_training
    from rlvr.train.run import resume_config

    common = dict(eval_every=3, eval_size=8, save_every=1, rollout_actors=1)
    run_training(small_config(**common, steps=3, out=str(tmp_path / "once")))
    run_training(small_config(**common, steps=2, out=str(tmp_path / "twice")))
    run_training(resume_config(str(tmp_path / "twice"), steps=3), mode="resume")
    once = read_metrics(tmp_path / "once" / "metrics.jsonl")
    twice = read_metrics(tmp_path / "twice" / "metrics.jsonl")
    assert [r["step"] for r in twice] == [0, 1, 2, 3]
    # the 2-step run also evaluated at its last step: compare the training metrics
    strip = lambda r: {k: v for k, v in _comparable(r).items() if "eval/" not in k}  # noqa: E731
    assert [strip(r) for r in twice] == [strip(r) for r in once]
    assert twice[-1]["eval/accuracy"] == once[-1]["eval/accuracy"]
