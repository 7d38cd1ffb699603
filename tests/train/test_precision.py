"""A run's precision (rlvr/train/sampler/precision.py): the config's checks, a bf16 trainer with a
bf16 sampler of its own on the embedded model (the sampler's copy is the rounded master
weights after every sync, the mismatch shows), and resume re-deriving the copy exactly."""

from __future__ import annotations

import warnings

import pytest
import torch
from resume_testlib import trained_and_saved

from rlvr.models.precision import bf16_supported
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.run import _restore
from rlvr.train.sampler import precision as train_precision
from rlvr.train.sampler.precision import BF16_PROBE_TOLERANCE, AutocastEngine, OwnCopyEngine

needs_bf16 = pytest.mark.skipif(not bf16_supported("cpu"), reason="no native bf16 on this CPU")
BF16 = {"precision": "bf16", "sampler_precision": "bf16"}


def test_bad_choices_name_the_field_and_what_is_valid(small_config):
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, got 'fp16'"):
        small_config(precision="fp16")
    with pytest.raises(ValueError, match="sampler_precision must be one of same, bf16, got 'fp8'"):
        small_config(sampler_precision="fp8")


def test_bf16_over_bf16_weights_and_a_bf16_vllm_copy_are_refused(tmp_path):
    base = {"model": str(tmp_path), "task_options": {"digits": 2}, "progress": False}
    with pytest.raises(ValueError, match=r"precision=bf16 .* policy.dtype=bfloat16 stores"):
        resolve_config({**base, "precision": "bf16", "policy": {"dtype": "bfloat16"}})
    with pytest.raises(ValueError, match="rollout_engine='vllm' holds its own copy"):
        resolve_config({**base, "sampler_precision": "bf16", "rollout_engine": "vllm"})


def test_fp32_head_without_bf16_warns_that_it_has_no_effect(small_config):
    with pytest.warns(UserWarning, match="fp32_head=true has no effect"):
        small_config(fp32_head=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with bf16 on either side it takes effect: silent
        small_config(fp32_head=True, precision="bf16")
        small_config(fp32_head=True, sampler_precision="bf16")


def test_bf16_on_a_device_without_bf16_is_refused(small_config, monkeypatch):
    monkeypatch.setattr(train_precision, "bf16_supported", lambda device: False)
    cfg = small_config(sampler_precision="bf16")
    with pytest.raises(ValueError, match="sampler_precision=bf16, but this cpu has no native"):
        train_precision.check_device(cfg, torch.device("cpu"))
    train_precision.check_device(small_config(), torch.device("cpu"))  # fp32: no question


def _assert_copy_is_rounded_master(trainer: Trainer) -> None:
    twin = trainer.engine.sampler_model
    for (name, master), (_, copied) in zip(
        trainer.model.named_parameters(), twin.named_parameters(), strict=True
    ):
        assert master.dtype == torch.float32 and copied.dtype == torch.bfloat16
        assert torch.equal(copied, master.detach().to(torch.bfloat16)), name


@needs_bf16
def test_bf16_trainer_with_its_own_bf16_sampler_trains_and_logs_the_mismatch(small_config):
    trainer = Trainer(small_config(steps=2, **BF16))
    assert isinstance(trainer.engine, OwnCopyEngine)
    assert trainer.sync_probe.tolerance == BF16_PROBE_TOLERANCE
    initial = {n: p.clone() for n, p in trainer.engine.sampler_model.named_parameters()}
    for _ in range(2):
        metrics = trainer.train_step()
        assert metrics["train/update_skipped"] == 0
        _assert_copy_is_rounded_master(trainer)  # synced after the update
        # Manipulation check: sampler (bf16 weights) and trainer (bf16 autocast over
        # float32 weights, fp32 log-softmax) disagree, and the loss says by how much.
        assert metrics["rollout/mismatch_max_abs_log_ratio"] > 0
        assert metrics["rollout/mismatch_k3"] > 0
        assert 0 < metrics["train/sync_probe_gap"] < BF16_PROBE_TOLERANCE
    moved = [
        n
        for n, p in trainer.engine.sampler_model.named_parameters()
        if not torch.equal(p, initial[n])
    ]
    assert moved  # the copy follows the updates
    state = trainer.optimizer.state_dict()["state"]
    assert all(s["exp_avg"].dtype == torch.float32 for s in state.values())  # fp32 AdamW


@needs_bf16
def test_bf16_trainer_sampling_with_its_own_module_samples_in_bf16_too(small_config):
    """sampler_precision: same under precision: bf16: the engine computes as the trainer
    does (autocast), so the sampler's and the trainer's log-probs agree far below bf16's
    own error against float32."""
    trainer = Trainer(small_config(steps=1, precision="bf16"))
    assert isinstance(trainer.engine, AutocastEngine)
    metrics = trainer.train_step()
    assert metrics["rollout/mismatch_max_abs_log_ratio"] < 1e-3
    assert trainer.sync_probe.tolerance == BF16_PROBE_TOLERANCE


@needs_bf16
def test_resume_restores_master_weights_and_rederives_the_same_bf16_copy(small_config, tmp_path):
    """The checkpoint holds the float32 master weights only; the resume's weight sync
    rounds them into the sampler's copy, which then equals the uninterrupted run's
    bit for bit, and the next step is the same step."""
    cfg = small_config(steps=3, **BF16)
    first, saved = trained_and_saved(cfg, 2, tmp_path / "ckpt")
    resumed = Trainer(cfg)
    fresh = {n: p.clone() for n, p in resumed.engine.sampler_model.named_parameters()}
    _restore(resumed, saved)
    ours = dict(resumed.engine.sampler_model.named_parameters())
    for name, theirs in first.engine.sampler_model.named_parameters():
        assert torch.equal(ours[name], theirs), name
    assert any(not torch.equal(ours[n], fresh[n]) for n in fresh)  # the sync did happen
    drop_time = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}  # noqa: E731
    assert drop_time(resumed.train_step()) == drop_time(first.train_step())
