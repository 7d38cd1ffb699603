"""Crash safety in-process: checksummed fallback, crash mid-step, non-finite losses."""

from __future__ import annotations

import json

import pytest
import torch
from resume_testlib import weights

import rlvr.train.update as update
from rlvr.runlog.logger import read_metrics
from rlvr.train import run_training
from rlvr.train.checkpoints.checkpoint import find_resumable, load_trainer_state, verify_checkpoint
from rlvr.train.run import RunDiverged


def _manifest(path):
    return json.loads((path / "manifest.json").read_text())


def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(small_config, tmp_path):
    cfg = small_config(steps=3, save_every=1, keep_checkpoints=2)
    run_training(cfg)
    out = tmp_path / "run"
    final = weights(out / "checkpoint")
    assert sorted(p.name for p in out.glob("checkpoint*")) == [
        "checkpoint",
        "checkpoint.step-000002",
    ]  # keep_checkpoints=2: the newest and one fallback
    state = out / "checkpoint" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    assert "checksum" in verify_checkpoint(out / "checkpoint")
    with pytest.warns(UserWarning, match="unusable.*falling back"):
        assert find_resumable(out) == out / "checkpoint.step-000002"
    with pytest.warns(UserWarning, match="falling back"):
        run_training(cfg, mode="resume")  # redoes step 3 from step 2
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2, 3]
    again = weights(out / "checkpoint")
    assert all(torch.equal(final[k], again[k]) for k in final)
    assert load_trainer_state(out / "checkpoint")["step"] == 3
    names = sorted(p.name for p in out.glob("checkpoint*"))
    assert names == ["checkpoint", "checkpoint.step-000002", "checkpoint.unusable-0"]
    assert verify_checkpoint(out / "checkpoint.unusable-0") is not None  # never a fallback


def test_crash_in_minibatch_2_keeps_the_good_checkpoint(small_config, tmp_path, monkeypatch):
    cfg = small_config(steps=4, save_every=1, num_minibatches=2)
    real, calls = update._clip_and_step, []

    def crash_in_step_3_minibatch_2(*args):
        calls.append(1)
        if len(calls) == 6:  # 2 optimizer steps per rollout step: step 3, minibatch 2
            raise RuntimeError("injected failure")
        return real(*args)

    monkeypatch.setattr(update, "_clip_and_step", crash_in_step_3_minibatch_2)
    with pytest.raises(RuntimeError, match="injected"):
        run_training(cfg)
    out = tmp_path / "run"
    good, crash = out / "checkpoint", out / "checkpoint.crash"
    assert verify_checkpoint(good) is None
    assert _manifest(good)["step"] == 2 and load_trainer_state(good)["step"] == 2
    assert _manifest(crash)["kind"] == "crash"
    assert load_trainer_state(crash)["step"] == 2  # completed steps, not the one that broke
    half, kept = weights(crash), weights(good)
    assert any(not torch.equal(half[k], kept[k]) for k in kept)  # minibatch 1 was applied
    monkeypatch.setattr(update, "_clip_and_step", real)
    run_training(cfg, mode="resume")
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2, 3, 4]


def test_nan_loss_skips_the_update_then_stops_as_diverged(small_config, tmp_path, monkeypatch):
    cfg = small_config(steps=5, save_every=1, max_nonfinite_steps=2)
    real = update.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(update, "policy_loss", nan_loss)
    out = tmp_path / "run"
    with pytest.raises(RunDiverged) as caught:
        run_training(cfg)
    message = str(caught.value)
    assert message.startswith("diverged at step 2: 2 consecutive steps")
    assert message.endswith(f"last good checkpoint at {out / 'checkpoint'} (step 1)")
    records = read_metrics(out / "metrics.jsonl")
    assert [r["train/nonfinite_skipped"] for r in records[1:]] == [1.0, 1.0]
    saved = weights(out / "checkpoint")
    assert all(torch.isfinite(v).all() for v in saved.values())
    # Nothing was applied: the good checkpoint still holds the initial (warm-start) weights.
    from rlvr.train import Trainer

    initial = Trainer(cfg).model.state_dict()
    assert all(torch.equal(initial[k], saved[k]) for k in saved)


def test_resume_without_a_good_checkpoint_starts_again_and_keeps_the_bad_one(
    small_config, tmp_path
):
    cfg = small_config(steps=2, save_every=0, keep_checkpoints=1)
    run_training(cfg)
    out = tmp_path / "run"
    first = [
        {k: v for k, v in r.items() if "time/" not in k}
        for r in read_metrics(out / "metrics.jsonl")
    ]
    (out / "summary.json").unlink()  # as if killed before the end
    (out / "checkpoint" / "manifest.json").unlink()  # as if killed while writing it
    with pytest.warns(UserWarning, match="no good checkpoint; starting the run again"):
        run_training(cfg, mode="resume")
    again = [
        {k: v for k, v in r.items() if "time/" not in k}
        for r in read_metrics(out / "metrics.jsonl")
    ]
    assert again == first  # one run from step 0, nothing appended twice
    assert (out / "checkpoint.unusable-0" / "trainer_state.pt").exists()


def test_a_resumed_runs_progress_bar_starts_at_its_finished_steps(
    small_config, tmp_path, monkeypatch
):
    import rlvr.train.run as run_module

    starts = []
    original = run_module.progress_bar

    def spy(total, enabled, desc="train", initial=0):
        starts.append((initial, total))
        return original(total, enabled, desc, initial)

    monkeypatch.setattr(run_module, "progress_bar", spy)
    cfg = small_config(steps=3, save_every=1, keep_checkpoints=2)
    run_training(cfg)
    out = tmp_path / "run"
    (out / "summary.json").unlink()  # as if killed after step 3's checkpoint...
    state = out / "checkpoint" / "trainer_state.pt"  # ...and that checkpoint torn
    state.write_bytes(state.read_bytes()[:100])
    with pytest.warns(UserWarning, match="falling back"):
        run_training(cfg, mode="resume")  # resumes after step 2
    assert starts == [(0, 3), (2, 3)]  # 2 of 3 steps shown done, not 0 of 3
