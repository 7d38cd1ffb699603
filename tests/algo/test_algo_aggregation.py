"""Aggregation modes (docs/algorithms.md §4) on a ragged 2-group batch, by hand."""

import pytest
import torch
from algo_testlib import F64, mask_of, padded

from rlvr.algo.policy.aggregation import aggregate, aggregation_weights
from rlvr.algo.registry import AGGREGATIONS

close = torch.testing.assert_close

# Per-token losses; padding is 100 so that any leak shows.
#   row 0 (group 4): (1, 2)        len 2, sum 3
#   row 1 (group 4): (3, 4, 5)     len 3, sum 12
#   row 2 (group 1): (6)           len 1, sum 6
#   row 3 (group 1): (1, 1, 1)     len 3, sum 3
# N_seq = 4, P = 2, tokens = 9, Σℓ = 24; group 4 has 5 tokens (Σ 15), group 1 has 4 (Σ 9).
LOSS = padded([[1, 2], [3, 4, 5], [6], [1, 1, 1]], pad=100.0)
MASK = mask_of([2, 3, 1, 3])
GROUP_IDS = torch.tensor([4, 4, 1, 1])

HAND = {
    # (1/4)·(3/2 + 12/3 + 6/1 + 3/3) = (1/4)·12.5
    "seq_mean_token_mean": 12.5 / 4,
    # 24/9
    "token_mean": 24 / 9,
    # 24/4
    "seq_mean_token_sum": 6.0,
    # 24/(4·8), L_budget = 8
    "constant": 24 / 32,
    # (1/2)·(15/5 + 9/4) = (1/2)·5.25
    "prompt_mean": 5.25 / 2,
}


def test_every_mode_has_a_hand_value():
    assert set(HAND) == set(AGGREGATIONS.names())


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_aggregation_hand_values(mode):
    weights = aggregation_weights(mode, MASK, GROUP_IDS, max_new_tokens=8)
    assert torch.all(weights[MASK == 0] == 0)
    close(aggregate(LOSS, weights), torch.tensor(HAND[mode], dtype=F64), rtol=1e-12, atol=0)


def test_prompt_mean_weights_by_hand():
    # w = (1/P)·1/Σ_{j∈g}|y_j|: group 4 → 1/(2·5) = 0.1; group 1 → 1/(2·4) = 0.125.
    weights = aggregation_weights("prompt_mean", MASK, GROUP_IDS)
    expected = MASK * torch.tensor([0.1, 0.1, 0.125, 0.125], dtype=F64)[:, None]
    close(weights, expected, rtol=1e-12, atol=0)


def test_constant_needs_max_new_tokens():
    with pytest.raises(ValueError, match="max_new_tokens"):
        aggregation_weights("constant", MASK, GROUP_IDS)


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match=r"'seq_mean'.*token_mean"):
        aggregation_weights("seq_mean", MASK, GROUP_IDS)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_aggregation_is_linear_in_rows(mode):
    # Weights computed once on the whole batch: rows summed separately give the same loss.
    weights = aggregation_weights(mode, MASK, GROUP_IDS, max_new_tokens=8)
    parts = sum(aggregate(LOSS[i : i + 1], weights[i : i + 1]) for i in range(4))
    close(parts, aggregate(LOSS, weights), rtol=1e-12, atol=0)
