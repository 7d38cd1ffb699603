"""One end-to-end `Trainer` step on two gloo ranks equals the single-process step."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.train import Trainer
from rlvr.train.distributed import DataParallel, DataParallelTrainer


def _rank(rank: int, world: int, init: str, cfg, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        trainer = DataParallelTrainer(cfg, DataParallel(rank, world))
        metrics = trainer.train_step()
        weights = [p.detach().clone() for p in trainer.model.parameters()]
        torch.save((metrics, weights), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_rank_trainer_step_equals_one_process(small_config, tmp_path):
    """prompt_mean aggregation, 5 prompt groups: rank 0 trains 3 of them, rank 1 two."""
    cfg = small_config(recipe="grpo", prompts_per_step=5, aggregation="prompt_mean", lr=1e-3)
    out = str(tmp_path / "rank")
    mp.spawn(_rank, args=(2, f"file://{tmp_path / 'init'}", cfg, out), nprocs=2, join=True)
    trainer = Trainer(cfg)
    expected = trainer.train_step()
    ref = [p.detach() for p in trainer.model.parameters()]
    for rank in (0, 1):
        metrics, weights = torch.load(f"{out}.{rank}", weights_only=False)
        for a, b in zip(weights, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # AdamW step 1 ≈ lr·sign(g)
        for key, value in expected.items():
            if not key.startswith("time/"):
                assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert (
        max((a - b).abs().max() for a, b in zip(ref, Trainer(cfg).model.parameters(), strict=True))
        > 0
    )
