"""Episodes under data parallelism: a two-rank (gloo) trainer step on multi-turn episodes
equals the single-process step — weights, loss and every env/ metric — with DDP and with
FSDP2. Observation tokens are context on every rank and never counted: token_mean's
normaliser is the global count of policy tokens, so a rank's share must not change it."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from local_model import local_policy_dir
from rounding_testlib import assert_first_adamw_step_equal
from test_train_data_parallel import _spawn, step_bounds

from rlvr.train import Trainer
from rlvr.train.config import resolve_config
from rlvr.train.distributed.data_parallel import DataParallel
from rlvr.train.distributed.ddp import DataParallelTrainer

ECHO = {  # tests/user_envs.py: answers every turn with an observation
    "environment": "user_envs:Echo",
    "episode": {"max_turns": 4, "max_turn_tokens": 3},
    "max_new_tokens": 24,
}


def _config(tmp_path, **overrides):
    values = {
        "model": local_policy_dir(tmp_path),
        "task_options": {"digits": 2, "ops": "+"},
        "prompts_per_step": 5,  # dealt 3 + 2 over the ranks
        "group_size": 3,
        "eval_size": 4,
        "lr": 1e-3,
        "aggregation": "token_mean",
        # The random policy gets every sum wrong; shorter is better gives groups variance.
        "reward_funcs": ["user_rewards:brevity"],
        "progress": False,
        "sync_probe": False,  # not run under torchrun yet: its metric is rank 0's alone
        "out": str(tmp_path / "run"),
        **ECHO,
        **overrides,
    }
    return resolve_config(values)


def _rank(rank: int, world: int, init: str, cfg, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        if cfg.parallel == "fsdp":
            from rlvr.train.distributed.sharded import ShardedTrainer

            trainer = ShardedTrainer(cfg, DataParallel(rank, world, sharded=True))
            policy = trainer.full_policy
        else:
            trainer = DataParallelTrainer(cfg, DataParallel(rank, world))
            policy = trainer.model
        metrics = trainer.train_step()
        weights = [p.detach().clone() for p in policy.parameters()]
        if rank == 0:
            torch.save((metrics, weights), out)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_rank_episode_step_equals_one_process(tmp_path, parallel):
    cfg = _config(tmp_path, parallel=parallel, micro_batch_size=4)
    out = str(tmp_path / "rank0.pt")
    _spawn(_rank, (2, f"file://{tmp_path / 'init'}", cfg, out))
    one_process = _config(tmp_path, parallel="ddp", micro_batch_size=4)
    trainer = Trainer(one_process)
    expected = trainer.train_step()
    assert expected["env/observation_tokens"] > 0 and expected["env/turns"] > 1
    metrics, weights = torch.load(out, weights_only=False)
    # Each rank sums its own rows (FSDP: with the unfused forward): rounding only, within
    # the reordered-sum bounds of 5 groups × 3 responses of ≤ 24 tokens (rounding_testlib).
    bounds = step_bounds(trainer.model, 5 * 3, cfg.max_new_tokens)
    assert_first_adamw_step_equal(weights, trainer.model, cfg.lr, bounds.grad_terms)
    bounds.assert_metrics(metrics, expected)
    start = Trainer(one_process).model.parameters()
    assert max((a - b).abs().max() for a, b in zip(weights, start, strict=True)) > 0  # it moved
