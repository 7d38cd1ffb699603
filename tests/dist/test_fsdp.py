"""FSDP2 on two gloo ranks: each rank computes its share of the prompt groups on a policy
whose weights, gradients and optimizer states are sharded, and the gathered gradient and
updated weights equal those of one process training on the whole batch
(rlvr/train/distributed/fsdp.py, rlvr/train/distributed/sharded.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from test_data_parallel import CASES, _update, assert_equals_one_process, spawn_two_ranks
from torch.utils.checkpoint import checkpoint

from rlvr.models.fused_llama import supports
from rlvr.train.distributed.data_parallel import DataParallel

FSDP_CASES = [CASES[0], CASES[1], CASES[3], CASES[4], CASES[5]]


def _shard(model: torch.nn.Module, world: int) -> None:
    from rlvr.train.distributed.fsdp import fsdp_mesh, shard_policy

    shard_policy(model, fsdp_mesh(world))
    assert not supports(model)  # the fused path would read sharded weights


def _full(tensors):
    return [t.full_tensor() for t in tensors]  # DTensor shards → whole tensors (collective)


def _gathered(grads, weights, metrics, steps):
    """An `_update`'s result with every sharded tensor gathered whole."""
    steps = [(_full(g), _full(w)) for g, w in steps]
    return _full(grads), _full(weights), metrics, steps


def _rank(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        results = []
        for case in FSDP_CASES:
            update = _update(
                case, DataParallel(rank, world, sharded=True), shard=lambda m: _shard(m, world)
            )
            results.append(_gathered(*update))
        results.append(_chunked_head_update(rank, world))
        if rank == 0:
            torch.save(results, out)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()


CHUNKED_CASE = CASES[1]


def _chunked_head_update(rank: int, world: int):
    """`CHUNKED_CASE` with the LM head in chunks of 3 positions (V = 20), each recomputed
    in the backward from the root's gathered weights; also how many chunks' logits the
    forward and backward computed (the trained head's Function, or autograd's checkpoint)."""
    from rlvr.models import logprobs
    from rlvr.models.lean import chunked_head

    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return checkpoint(*args, **kwargs)

    def written(*args):
        calls.append(1)
        return write(*args)

    write = chunked_head._logits_into
    saved = logprobs.CHUNK_VALUES, logprobs.checkpoint
    logprobs.CHUNK_VALUES, logprobs.checkpoint = 3 * 20, counted
    chunked_head._logits_into = written
    try:
        update = _update(
            CHUNKED_CASE, DataParallel(rank, world, sharded=True), shard=lambda m: _shard(m, world)
        )
    finally:
        logprobs.CHUNK_VALUES, logprobs.checkpoint = saved
        chunked_head._logits_into = write
    return _gathered(*update), len(calls)


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    return spawn_two_ranks(_rank, tmp_path_factory.mktemp("fsdp"))


@pytest.mark.parametrize("index", range(len(FSDP_CASES)), ids=[str(c) for c in FSDP_CASES])
def test_two_sharded_ranks_equal_one_process(two_rank_results, index):
    assert_equals_one_process(two_rank_results[index], FSDP_CASES[index])


def test_a_sharded_policy_takes_its_lm_head_in_chunks(two_rank_results, monkeypatch):
    """The sharded root's registered forward runs the chunked head too: with 3 positions
    per chunk, the gradient and weights equal one process's chunked update (chunked equals
    unchunked: tests/models/test_models_logprobs.py). Each rank chunks its own rows, so the
    two sides' head products add in other orders: within the same reordered-sum bound."""
    from rlvr.models import logprobs

    result, chunks = two_rank_results[len(FSDP_CASES)]
    assert chunks > 1
    monkeypatch.setattr(logprobs, "CHUNK_VALUES", 3 * 20)
    assert_equals_one_process(result, CHUNKED_CASE)


def test_idle_micro_batches_even_out_the_ranks():
    group_ids = torch.tensor([0, 0, 1, 1, 3, 3, 4, 4])
    rows = torch.tensor([True, True, False, False, True, True, True, True])
    # rank 0 computes groups {0, 4} (4 rows), rank 1 group {3} (2 rows); micro-batches of
    # 1 row: rank 0 runs 4, rank 1 runs 2 and adds 2 idle ones; not sharded: none added.
    assert DataParallel(0, 2, sharded=True).idle_micro_batches(group_ids, rows, 1) == 0
    assert DataParallel(1, 2, sharded=True).idle_micro_batches(group_ids, rows, 1) == 2
    # micro-batches of 3 rows: ⌈4/3⌉ = 2 and ⌈2/3⌉ = 1
    assert DataParallel(1, 2, sharded=True).idle_micro_batches(group_ids, rows, 3) == 1
    assert DataParallel(1, 2).idle_micro_batches(group_ids, rows, 1) == 0
