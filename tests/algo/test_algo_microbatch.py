"""Any split of the prepared rows into micro-batches and ranks gives the whole-batch gradient.

docs/algorithms.md §4: the normalizers are counted over the whole rollout batch before
micro-batching and sharding, so Σ over micro-batches (and over ranks, all-reduce by sum)
of ∂L_mb/∂logπ equals ∂L/∂logπ of the whole batch, for every aggregation and recipe.
"""

import math

import pytest
import torch
from algo_testlib import Batch, loss_and_grad, prepare, random_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algo import RECIPES, get_recipe
from rlvr.algo.registry import AGGREGATIONS, SURROGATES

# Every named recipe, read from the registry of recipes: a new recipe cannot skip this test,
# unless its surrogate declares per_micro_batch (Clip-Cov, KL-Cov: token statistics over the
# rows given, as verl computes them; tests/algo/test_algo_surrogates_v2.py shows the split
# changes them).
NAMES = sorted(n for n, r in RECIPES.items() if not SURROGATES.get(r.surrogate).per_micro_batch)


def split_grad(recipe, batch: Batch, prepared, rank_of, micro_of):
    """Each rank has its own copy of logπ and sums its micro-batches; grads are summed."""
    total_loss, total_grad = 0.0, torch.zeros_like(batch.logprobs)
    for rank in sorted(set(rank_of)):
        row_sets = []
        for micro in sorted(set(micro_of)):
            rows = [i for i in range(len(rank_of)) if rank_of[i] == rank and micro_of[i] == micro]
            row_sets.append(torch.tensor(rows, dtype=torch.long))
        loss, grad = loss_and_grad(recipe, batch, prepared, row_sets)
        total_loss += loss
        total_grad += grad
    return total_loss, total_grad


def check_equivalence(recipe, batch, rank_of, micro_of):
    prepared = prepare(recipe, batch)
    loss_whole, grad_whole = loss_and_grad(recipe, batch, prepared)
    loss_split, grad_split = split_grad(recipe, batch, prepared, rank_of, micro_of)
    # float64 (ε = 2.2e-16): the loss and each gradient element sum at most a few hundred
    # terms of size ≤ ~10 in other orders, so they differ by ≤ n·ε·M ≈ 300·2.2e-16·10 ≈ 7e-13
    # absolute, ~1e-13 relative: rel 1e-9 and abs 1e-12 hold on any CPU.
    assert math.isclose(loss_whole, loss_split, rel_tol=1e-9, abs_tol=1e-12)
    torch.testing.assert_close(grad_split, grad_whole, rtol=1e-9, atol=1e-12)
    return grad_whole


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("name", NAMES)
def test_microbatch_equivalence_deterministic(name, aggregation):
    # 3 groups of sizes (3, 1, 4), ragged lengths 1..7, off-policy, DAPO overlong at 5..7.
    lengths = [3, 7, 1, 5, 2, 6, 4, 7]
    batch = random_batch(17, [3, 1, 4], lengths, max_new_tokens=7, correct=[1, 0, 1, 1, 0, 1, 1, 0])
    recipe = get_recipe(name, aggregation=aggregation)
    rank_of = [0, 1, 1, 0, 0, 1, 0, 1]
    micro_of = [0, 0, 1, 2, 1, 2, 0, 1]
    grad = check_equivalence(recipe, batch, rank_of, micro_of)
    assert grad.abs().sum() > 0
    assert torch.all(grad[batch.mask == 0] == 0)


@st.composite
def batches(draw):
    group_sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    n = sum(group_sizes)
    lengths = draw(st.lists(st.integers(1, 7), min_size=n, max_size=n))
    correct = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**16))
    rank_of = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    micro_of = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    batch = random_batch(seed, group_sizes, lengths, max_new_tokens=7, correct=correct)
    return batch, rank_of, micro_of


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@settings(max_examples=30, deadline=None)
@given(data=batches(), name=st.sampled_from(NAMES))
def test_microbatch_equivalence_property(aggregation, data, name):
    batch, rank_of, micro_of = data
    check_equivalence(get_recipe(name, aggregation=aggregation), batch, rank_of, micro_of)
