"""Adaptive entropy in the loop (issue 29): the trainer holds the controller
(rlvr/algo/entropy_control.py), gives the loss its applied c_k, updates it from the step's
logged `policy/entropy` (over every rank), logs c_k as `loss/entropy_coef` and keeps it in
checkpoints, so a resumed run equals the uninterrupted one."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from local_model import local_trainer
from resume_testlib import weights, without_time
from rounding_testlib import logprob_atol

from rlvr.algo.entropy_control import adaptive_entropy
from rlvr.runlog.logger import read_metrics
from rlvr.train import Trainer, run_training
from rlvr.train.distributed.ddp import DataParallel, DataParallelTrainer
from rlvr.train.run import resume_config

# The embedded policy's mean token entropy is ~0.15 nats: a target of 5 is never reached,
# so from step 2 the bonus acts and c rises by δ to its cap: 0.01 → 0.03 → 0.05 → 0.05.
ABOVE = {
    "entropy_coef": 0.01,
    "entropy_target": 5.0,
    "entropy_coef_delta": 0.02,
    "entropy_coef_max": 0.05,
}
FAST = {
    "eval_every": 2,
    "eval_size": 4,
}  # the 2-step part ends with an eval: so does the whole at 2


def _steps(out) -> list[dict]:
    return [r for r in read_metrics(out / "metrics.jsonl") if r["step"] >= 1]


def _replay(records: list[dict], recipe) -> list[float]:
    """The applied c_k of the pure controller fed the logged H_1, H_2, …"""
    control, applied = adaptive_entropy(recipe), []
    for record in records:
        applied.append(control.applied_coef())
        control = control.update(record["policy/entropy"])
    return applied


def test_embedded_run_raises_c_below_target_and_resumes_exactly(small_config, tmp_path):
    whole = small_config(steps=3, out=str(tmp_path / "whole"), **FAST, **ABOVE)
    run_training(whole)
    records = _steps(tmp_path / "whole")
    logged = [r["loss/entropy_coef"] for r in records]
    # Step 1: H_0 unknown (∞ > target), no bonus; then c_k = min(0.01 + 0.02·(k−1), 0.05).
    assert logged == pytest.approx([0.0, 0.03, 0.05], abs=1e-12)
    assert logged == _replay(records, whole.build_recipe())  # the logged H drives it
    assert "loss/entropy" not in records[0] and all("loss/entropy" in r for r in records[1:])

    part = small_config(steps=2, out=str(tmp_path / "part"), **FAST, **ABOVE)
    run_training(part)
    run_training(resume_config(str(tmp_path / "part"), steps=3), mode="resume")
    # Without c_2 and H_2 in the checkpoint, step 3 would apply 0 (H_2 = ∞) and differ.
    assert without_time(tmp_path / "part") == without_time(tmp_path / "whole")
    mine, theirs = (
        weights(tmp_path / "part" / "checkpoint"),
        weights(tmp_path / "whole" / "checkpoint"),
    )
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_above_target_c_falls_to_its_floor_and_the_bonus_stays_off(tmp_path):
    # A random 2-layer model has entropy near log(vocab) ≫ 0.5: c falls by δ to c_min.
    trainer = local_trainer(
        tmp_path,
        entropy_coef=0.03,
        entropy_target=0.5,
        entropy_coef_delta=0.02,
        entropy_coef_min=0.005,
    )
    coefs = []
    for _ in range(3):
        metrics = trainer.train_step()
        assert metrics["loss/entropy_coef"] == 0.0 and "loss/entropy" not in metrics
        assert metrics["policy/entropy"] > 0.5
        coefs.append(trainer.entropy_control.coef)
    assert coefs == pytest.approx([0.01, 0.005, 0.005], abs=1e-12)
    assert trainer.state_dict()["entropy_control"] == {
        "coef": trainer.entropy_control.coef,
        "last_entropy": metrics["policy/entropy"],
    }


def test_static_entropy_coef_has_no_controller(tmp_path):
    trainer = local_trainer(tmp_path, entropy_coef=0.01)
    metrics = trainer.train_step()
    assert trainer.entropy_control is None and "loss/entropy_coef" not in metrics
    assert "loss/entropy" in metrics and trainer.state_dict()["entropy_control"] is None


# ------------------------------------------------------------------ two gloo ranks

RESUMED = {"coef": 0.04, "last_entropy": 0.0}  # as if rank 0 had resumed: bonus on at once


def _rank(rank: int, world: int, init: str, cfg, out: str) -> None:
    from rlvr.train.distributed.sharded import ShardedTrainer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        sharded = cfg.parallel == "fsdp"
        kind = ShardedTrainer if sharded else DataParallelTrainer
        trainer = kind(cfg, DataParallel(rank, world, sharded=sharded))
        if rank == 0:  # the followers take it with the first batch
            trainer.entropy_control = trainer.entropy_control.with_state(RESUMED)
        metrics = trainer.train_step()
        torch.save((metrics, trainer.entropy_control.state_dict()), f"{out}.{rank}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_follow_the_all_rank_entropy(small_config, tmp_path, parallel):
    """5 prompt groups, 3 on rank 0 and 2 on rank 1: both ranks apply rank 0's c, and each
    rank's controller is updated from the entropy over both shards (one shard's differs)."""
    cfg = small_config(prompts_per_step=5, lr=1e-3, micro_batch_size=4, **ABOVE)
    dp_cfg = small_config(**{**cfg.to_dict(), "parallel": parallel})
    context = mp.spawn(
        _rank,
        args=(2, f"file://{tmp_path / 'init'}", dp_cfg, str(tmp_path / "rank")),
        nprocs=2,
        join=False,
    )
    deadline = time.monotonic() + 300
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the ranks did not finish within 300 s")
    one = Trainer(cfg)
    one.entropy_control = one.entropy_control.with_state(RESUMED)
    expected = one.train_step()
    assert expected["loss/entropy_coef"] == 0.04 and "loss/entropy" in expected
    for rank in (0, 1):
        metrics, state = torch.load(f"{tmp_path / 'rank'}.{rank}", weights_only=False)
        assert metrics["loss/entropy_coef"] == 0.04
        # Each rank's forward adds in other orders than one process's: an entropy (and the
        # bonus c·H) moves by ≤ 2·H·τ (rounding_testlib.StepBounds).
        rel = 2 * logprob_atol(one.model.config)
        assert metrics["loss/entropy"] == pytest.approx(expected["loss/entropy"], rel=rel)
        assert state["coef"] == one.entropy_control.coef == 0.05
        assert state["last_entropy"] == pytest.approx(expected["policy/entropy"], rel=rel)
