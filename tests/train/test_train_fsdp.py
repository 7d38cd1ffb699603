"""FSDP2 end to end (`parallel: fsdp`): a `ShardedTrainer` step and an `rlvr train`-style
run on two gloo ranks equal the single-process ones, checkpoints included (resumed too)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.distributed as dist
from rounding_testlib import assert_first_adamw_step_equal, assert_within, reorder_atol
from test_train_data_parallel import _spawn, step_bounds

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
    # The sharded forward is the unfused one, and each rank sums its own rows: rounding
    # only, within the reordered-sum bounds (rounding_testlib.py).
    bounds = step_bounds(trainer.model, 5 * 4, cfg.max_new_tokens)
    assert_first_adamw_step_equal(weights, trainer.model, cfg.lr, bounds.grad_terms)
    bounds.assert_metrics(metrics, expected)


def _run_rank(rank: int, world: int, init: str, cfg, mode: str) -> None:
    """`run_training` as under torchrun (RANK and WORLD_SIZE set), in a group made here
    over a file store: rank 0 hosting a TCP store could end, and close it, while rank 1
    still tears down (gloo aborted rank 1 so in 2 of 5 fresh-clone runs); the env://
    rendezvous itself is tested by test_train_data_parallel's torchrun-style run."""
    import os
    import sys

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        run_training(cfg, mode)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()
    # The run's files are written and closed; skip the interpreter's teardown, where a
    # C++ thread still joinable at exit aborted rank 1 ("terminate called without an
    # active exception", SIGABRT) in 1 of the session's fresh-clone runs, after its run
    # had finished. A rank that fails above still raises and fails the test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _same_metrics(a_path, b_path, steps, bounds):
    """The runs' logged metrics agree step by step within `bounds` (rounding_testlib.py).
    A step after the first starts from weights AdamW's first step left apart by up to
    2·lr where a gradient was within rounding of 0 (adamw_first_step_atol): such a weight
    is one the loss is flat along, so its effect on later steps is taken to stay inside the
    same per-step bounds (an assumption, not a bound; tests/dist checks every step of an
    update at equal weights)."""
    a, b = read_metrics(a_path / "metrics.jsonl"), read_metrics(b_path / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b] == steps
    for x, y in zip(a, b, strict=True):
        bounds.assert_metrics(x, y)


def _same_moments(mine, ref, grad_terms: int) -> None:
    """AdamW's moments after t steps, m = (1−β₁)·Σₖ β₁^(t−k)·gₖ and v = (1−β₂)·Σₖ β₂^(t−k)·gₖ²,
    from gradients each known to δ = 2·n·ε·G (a reordered sum and clipping's 1/‖g‖, as in
    assert_first_adamw_step_equal; later steps under `_same_metrics`' assumption), with
    G ≥ |gₖ| read off v ≥ (1−β₂)·β₂^(t−1)·gₖ²: |Δm| ≤ (1 − β₁^t)·δ ≤ δ and
    |Δv| ≤ (1 − β₂^t)·(2G + δ)·δ (|Δg²| ≤ 2|g|·δ + δ²)."""
    (beta1, beta2) = ref["param_groups"][0]["betas"]
    for i, moments in ref["state"].items():
        assert torch.equal(mine["state"][i]["step"], moments["step"])
        t = int(moments["step"])
        g = (moments["exp_avg_sq"].max().item() / ((1 - beta2) * beta2 ** (t - 1))) ** 0.5
        delta = 2 * reorder_atol(grad_terms, g)
        atol = {
            "exp_avg": (1 - beta1**t) * delta,
            "exp_avg_sq": (1 - beta2**t) * (2 * g + delta) * delta,
        }
        for name, bound in atol.items():
            assert_within(mine["state"][i][name], moments[name], bound, f"{i} {name}:")


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
    bounds = step_bounds(Trainer(sharded).model, 5 * 4, sharded.max_new_tokens)
    _same_metrics(tmp_path / "fsdp", tmp_path / "one", [0, 1, 2], bounds)
    mine = load_trainer_state(tmp_path / "fsdp" / "checkpoint")["optimizers"]["optimizer"]
    ref = load_trainer_state(tmp_path / "one" / "checkpoint")["optimizers"]["optimizer"]
    assert mine["param_groups"] == ref["param_groups"]
    assert sorted(mine["state"]) == sorted(ref["state"])
    _same_moments(mine, ref, bounds.grad_terms)

    shutil.copytree(tmp_path / "fsdp", tmp_path / "alone")
    resumed = small_config(**{**sharded.to_dict(), "steps": 3})
    _spawn(_run_rank, (2, f"file://{tmp_path / 'init-resume'}", resumed, "resume"))
    run_training(small_config(**cfg, steps=3, out=str(tmp_path / "one3")))
    _same_metrics(tmp_path / "fsdp", tmp_path / "one3", [0, 1, 2, 3], bounds)
    # The checkpoint is the single-process one: one process resumes it as well.
    alone = {**sharded.to_dict(), "steps": 3, "parallel": "ddp", "out": str(tmp_path / "alone")}
    run_training(small_config(**alone), "resume")
    _same_metrics(tmp_path / "alone", tmp_path / "one3", [0, 1, 2, 3], bounds)


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
