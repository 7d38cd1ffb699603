"""PPO epochs reshuffle their minibatches with the Trainer's own generator (issue 9)."""

from __future__ import annotations

import torch
from local_model import local_trainer

import rlvr.train.update as update
from rlvr.train.update import minibatch_rows


def partition(masks: list[torch.Tensor], group_ids: torch.Tensor) -> list[list[int]]:
    return [sorted(set(group_ids[m].tolist())) for m in masks]


def test_minibatch_rows_reshuffles_per_call_and_keeps_whole_groups():
    group_ids = torch.arange(8).repeat_interleave(2)  # 8 groups of 2 rows
    keep = torch.ones(16, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    epochs = [partition(minibatch_rows(group_ids, keep, 2, generator), group_ids) for _ in range(2)]
    assert epochs[0] != epochs[1]
    for epoch in epochs:  # every group exactly once, 4 per minibatch
        assert sorted(g for mb in epoch for g in mb) == list(range(8))
        assert [len(mb) for mb in epoch] == [4, 4]
    # Without a generator the order is fixed: every epoch would see the same minibatches.
    fixed = [partition(minibatch_rows(group_ids, keep, 2), group_ids) for _ in range(2)]
    assert fixed[0] == fixed[1] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def _run(tmp_path, monkeypatch, seen):
    real = minibatch_rows

    def spy(group_ids, keep, count, generator=None):
        masks = real(group_ids, keep, count, generator)
        seen.append(partition(masks, group_ids))
        return masks

    monkeypatch.setattr(update, "minibatch_rows", spy)
    trainer = local_trainer(
        tmp_path, recipe="grpo", prompts_per_step=4, num_minibatches=2, ppo_epochs=3
    )
    trainer.train_step()
    return [p.detach().clone() for p in trainer.model.parameters()]


def test_epochs_see_different_orders_and_the_run_stays_deterministic(tmp_path, monkeypatch):
    first_seen, second_seen = [], []
    first = _run(tmp_path / "a", monkeypatch, first_seen)
    second = _run(tmp_path / "b", monkeypatch, second_seen)
    assert len(first_seen) == 3  # one call per epoch
    assert len({str(order) for order in first_seen}) > 1
    assert first_seen == second_seen
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
