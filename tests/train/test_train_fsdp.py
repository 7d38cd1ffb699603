"""FSDP2 end to end (`parallel: fsdp`): a `ShardedTrainer` step and an `rlvr train`-style
run on two gloo ranks equal the single-process ones, checkpoints included (resumed too)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.distributed as dist
from test_train_data_parallel import _spawn

from rlvr.runlog.logger import read_metrics
from rlvr.train import Trainer, run_training
from rlvr.train.checkpoints.checkpoint import load_trainer_state
from rlvr.train.distributed.data_parallel import DataParallel


def _rank(rank: int, world: int, init: str, cfg, out: str) -> None:
    from rlvr.train.distributed.sharded import ShardedTrainer

    class Perturbed(ShardedTrainer):
        """Rank 1 starts from other weights (π and π_ref): rank 0's must reach its shards."""

        def _share_initial_weights(self) -> None:
            for module in (self.model, self.reference):
                for p in [] if module is None or rank == 0 else module.parameters():
                    p.data.add_(0.5)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        trainer = Perturbed(cfg, DataParallel(rank, world, sharded=True))
        metrics = trainer.train_step()
        if rank == 0:  # its unsharded copy, gathered from the shards after the update
            weights = [p.detach().clone() for p in trainer.full_policy.parameters()]
            torch.save((metrics, weights), out)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "recipe",
    [{"recipe": "grpo", "aggregation": "prompt_mean", "kl_coef": 0.1}, {"recipe": "ppo"}],
)
def test_two_rank_sharded_step_equals_one_process(small_config, tmp_path, recipe):
    """5 prompt groups dealt 3 + 2, micro-batches of 4 rows: rank 0 runs 3 passes, rank 1
    two and an idle one. PPO: the critic is replicated, its update computed on every rank."""
    cfg = small_config(  # no sync probe: it is not run under torchrun
        **recipe, prompts_per_step=5, lr=1e-3, micro_batch_size=4, parallel="fsdp", sync_probe=False
    )
    out = str(tmp_path / "rank0.pt")
    _spawn(_rank, (2, f"file://{tmp_path / 'init'}", cfg, out))
    trainer = Trainer(small_config(**{**cfg.to_dict(), "parallel": "ddp"}))
    expected = trainer.train_step()
    metrics, weights = torch.load(out, weights_only=False)
    for a, b in zip(weights, trainer.model.parameters(), strict=True):
        # AdamW's first step is lr·g/(|g| + ε): where |g| is near ε = 1e-8, float noise in g
        # (the sharded forward is the unfused one) moves a weight by a fraction of lr = 1e-3.
        torch.testing.assert_close(a, b.detach(), rtol=1e-4, atol=5e-5)
    for key, value in expected.items():
        if not key.startswith("time/"):
            assert metrics[key] == pytest.approx(value, rel=1e-4, abs=_abs(key)), key


def _run_rank(rank: int, world: int, init: str, cfg, mode: str) -> None:
    """`run_training` as under torchrun (RANK and WORLD_SIZE set), in a group made here
    over a file store: rank 0 hosting a TCP store could end, and close it, while rank 1
    still tears down (gloo aborted rank 1 so in 2 of 5 fresh-clone runs); the env://
    rendezvous itself is tested by test_train_data_parallel's torchrun-style run."""
    import os

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        run_training(cfg, mode)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()


def _abs(key: str) -> float:
    """The absolute tolerance of a metric: the sampler-trainer mismatch of a float32 policy
    is rounding (~1e-6), which the sharded (unfused) forward rounds differently."""
    return 1e-5 if key.startswith("rollout/mismatch_") else 1e-6


def _same_metrics(a_path, b_path, steps):
    a, b = read_metrics(a_path / "metrics.jsonl"), read_metrics(b_path / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b] == steps
    for x, y in zip(a, b, strict=True):
        for key, value in y.items():
            if not key.startswith("time/"):
                assert x[key] == pytest.approx(value, rel=1e-4, abs=_abs(key)), key


@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_two_rank_run_writes_and_resumes_the_single_process_run(small_config, tmp_path, parallel):
    """GRPO with a KL term (π_ref sharded too), two shuffled minibatches (π_old forwards),
    2 ranks: the metrics and the checkpoint (weights, AdamW moments) are those of one
    process; a `--resume` to step 3 continues as the uninterrupted single-process run does
    (the followers take rank 0's restored minibatch generator)."""
    cfg = dict(  # no sync probe: it is not run under torchrun
        eval_every=2,
        eval_size=8,
        prompts_per_step=5,
        lr=1e-3,
        kl_coef=0.1,
        num_minibatches=2,
        sync_probe=False,
    )
    sharded = small_config(**cfg, steps=2, parallel=parallel, out=str(tmp_path / "fsdp"))
    _spawn(_run_rank, (2, f"file://{tmp_path / 'init-new'}", sharded, "new"))
    run_training(small_config(**cfg, steps=2, out=str(tmp_path / "one")))
    _same_metrics(tmp_path / "fsdp", tmp_path / "one", [0, 1, 2])
    mine = load_trainer_state(tmp_path / "fsdp" / "checkpoint")["optimizers"]["optimizer"]
    ref = load_trainer_state(tmp_path / "one" / "checkpoint")["optimizers"]["optimizer"]
    assert mine["param_groups"] == ref["param_groups"]
    assert sorted(mine["state"]) == sorted(ref["state"])
    for i, moments in ref["state"].items():
        for name, value in moments.items():
            torch.testing.assert_close(mine["state"][i][name], value, rtol=1e-3, atol=1e-7)

    shutil.copytree(tmp_path / "fsdp", tmp_path / "alone")
    resumed = small_config(**{**sharded.to_dict(), "steps": 3})
    _spawn(_run_rank, (2, f"file://{tmp_path / 'init-resume'}", resumed, "resume"))
    run_training(small_config(**cfg, steps=3, out=str(tmp_path / "one3")))
    _same_metrics(tmp_path / "fsdp", tmp_path / "one3", [0, 1, 2, 3])
    # The checkpoint is the single-process one: one process resumes it as well.
    alone = {**sharded.to_dict(), "steps": 3, "parallel": "ddp", "out": str(tmp_path / "alone")}
    run_training(small_config(**alone), "resume")
    _same_metrics(tmp_path / "alone", tmp_path / "one3", [0, 1, 2, 3])


def test_fsdp_needs_torchrun(small_config):
    from rlvr.train.distributed.async_pipeline import make_trainer

    with pytest.raises(ValueError, match="parallel='fsdp' shards the policy over torchrun"):
        make_trainer(small_config(parallel="fsdp"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"parallel": "zero3"}, "parallel must be one of ddp, fsdp, got 'zero3'"),
        (
            {"parallel": "fsdp", "rollout_actors": 2},
            "parallel='fsdp' does not support rollout_actors",
        ),
        (
            {"parallel": "fsdp", "policy": {"lora": {"rank": 4}}},
            "parallel='fsdp' does not support policy.lora",
        ),
    ],
)
def test_parallel_is_checked(small_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        small_config(**overrides)
