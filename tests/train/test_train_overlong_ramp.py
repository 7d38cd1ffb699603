"""DAPO's soft overlong ramp measures |y| on the same tokens as L_max (issue 9): a forced
interruption phrase uses up the budget, so it counts toward the ramp too."""

from __future__ import annotations

import torch
from local_model import local_trainer

from rlvr.train.records.rollout_record import Rollout


def test_overlong_ramp_counts_the_inserted_phrase(tmp_path):
    # L_max = 8, L_c = 4: the ramp starts after 8 − 4 = 4 tokens.
    # Row 0: 4 sampled tokens + a 2-token inserted phrase = 6 tokens of the budget:
    #   R_len = (8 − 4 − 6)/4 = −0.5, shaped r = 1 − 0.5 = 0.5.
    #   (Counting only the 4 sampled tokens would give R_len = 0, r = 1.)
    # Row 1: 3 sampled tokens, no phrase: R_len = 0, r = 0.
    trainer = local_trainer(tmp_path, recipe="dapo", max_new_tokens=8, overlong_cache=4)
    response_mask = torch.tensor([[1.0] * 6, [1.0] * 3 + [0.0] * 3])
    forced = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0.0] * 6])
    rollout = Rollout(
        prompt_ids=[[5, 6], [5, 6]],
        response_ids=torch.full((2, 6), 7),
        response_mask=response_mask,
        sampler_logprobs=torch.zeros(2, 6),
        truncated=torch.tensor([False, False]),
        group_ids=torch.tensor([0, 0]),
        problem_uids=["a", "a"],
        texts=["", ""],
        correct=torch.tensor([1.0, 0.0]),
        formatted=torch.tensor([1.0, 1.0]),
        rewards=torch.tensor([1.0, 0.0]),
        forced_mask=forced,
    )
    prepared = trainer._prepare(rollout)
    assert prepared.shaped_rewards.tolist() == [0.5, 0.0]
    # The phrase is still not trained on.
    assert prepared.response_mask[0].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
