"""Two gloo ranks, each computing its share of the prompt groups, produce the gradient and
the updated weights of one process training on the whole batch (rlvr/train/distributed/ddp.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.algo import prepare_batch
from rlvr.algo.recipes import get_recipe
from rlvr.models.tiny import build_tiny_policy, tiny_qwen2_config
from rlvr.train.distributed.ddp import DataParallel
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.update import UpdateSettings, policy_update

GROUPS, G, T = 5, 3, 6
# Groups 1 and 2 are uniformly wrong / right: dynamic sampling keeps groups {0, 3, 4}, which
# two ranks share unevenly (round-robin: rank 0 gets {0, 4}, rank 1 gets {3}).
CORRECT = [1, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0]
CASES = [
    ("grpo", {"aggregation": "token_mean", "kl_coef": 0.0}, 1),
    ("grpo", {"aggregation": "seq_mean_token_mean", "kl_coef": 0.0}, 1),
    ("grpo", {"aggregation": "constant", "kl_coef": 0.0}, 1),
    ("grpo", {"aggregation": "prompt_mean", "kl_coef": 0.0}, 1),
    (
        "grpo",
        {"aggregation": "prompt_mean", "kl_coef": 0.0},
        2,
    ),  # two optimizer steps, shuffled minibatches
    ("dapo", {"dynamic_sampling": True}, 1),
]


def _rollout() -> Rollout:
    gen = torch.Generator().manual_seed(7)
    n = GROUPS * G
    lengths = torch.randint(1, T + 1, (n,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    correct = torch.tensor(CORRECT, dtype=torch.float32)
    return Rollout(
        prompt_ids=[torch.randint(2, 20, (3,), generator=gen).tolist() for _ in range(n)],
        response_ids=torch.randint(2, 20, (n, T), generator=gen) * mask.long(),
        response_mask=mask,
        sampler_logprobs=torch.zeros(n, T),
        truncated=lengths == T,
        group_ids=torch.arange(GROUPS).repeat_interleave(G),
        problem_uids=[f"p{i // G}" for i in range(n)],
        texts=[""] * n,
        correct=correct,
        formatted=torch.ones(n),
        rewards=correct.clone(),
    )


def _update(case, data_parallel, shard=None):
    """One rollout batch's update; returns (gradients, weights) after it. `shard(model)`:
    shard the model before the optimizer is built (tests/dist/test_fsdp.py)."""
    name, overrides, minibatches = case
    recipe = get_recipe(name, **overrides)
    config = tiny_qwen2_config(20, hidden=16, layers=1, heads=2, kv_heads=2, intermediate=32)
    model = build_tiny_policy(config, seed=3)
    if shard is not None:
        shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rollout = _rollout()
    prepared = prepare_batch(
        recipe,
        rewards=rollout.rewards,
        correct=rollout.correct,
        truncated=rollout.truncated,
        response_mask=rollout.response_mask,
        group_ids=rollout.group_ids,
        max_new_tokens=T,
    )
    settings = UpdateSettings(minibatches, 1, 2, 1.0, T, 1.0, pad_id=0)
    generator = torch.Generator().manual_seed(11)
    metrics = policy_update(
        model, optimizer, recipe, rollout, prepared, settings, generator, data_parallel
    )
    grads = [p.grad.clone() for p in model.parameters()]
    weights = [p.detach().clone() for p in model.parameters()]
    return grads, weights, metrics


def _rank(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        results = [_update(case, DataParallel(rank, world)) for case in CASES]
        if rank == 0:
            torch.save(results, out)
        dist.barrier()  # no rank tears down while another is still talking
    finally:
        dist.destroy_process_group()


def spawn_two_ranks(rank_fn, tmp) -> list:
    """Run `rank_fn(rank, 2, init, out)` on 2 gloo processes; what rank 0 saved to `out`."""
    out = str(tmp / "results.pt")
    mp.spawn(rank_fn, args=(2, f"file://{tmp / 'init'}", out), nprocs=2, join=True)
    return torch.load(out, weights_only=False)


def assert_equals_one_process(result, case, weight_atol: float = 1e-6) -> None:
    """Gradients, updated weights and loss metrics of a multi-rank update equal one
    process's update on the whole batch of `case`. AdamW's first step moves a weight by
    lr·g/(|g| + ε), which turns float noise in a near-zero gradient element into up to
    lr·(noise/|g|): `weight_atol` allows for that where the two sides round differently."""
    grads, weights, metrics = result
    ref_grads, ref_weights, ref_metrics = _update(case, None)
    assert any(g.abs().sum() > 0 for g in ref_grads)  # the check compares something
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for a, b in zip(weights, ref_weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=weight_atol)
    for key in ("loss/policy", "train/grad_norm", "clip/ratio_mean"):
        if key in ref_metrics:
            assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-5, abs=1e-7)


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    return spawn_two_ranks(_rank, tmp_path_factory.mktemp("dp"))


@pytest.mark.parametrize("index", range(len(CASES)), ids=[str(c) for c in CASES])
def test_two_ranks_equal_one_process(two_rank_results, index):
    assert_equals_one_process(two_rank_results[index], CASES[index])


def test_shards_are_whole_groups_dealt_round_robin():
    group_ids = torch.tensor([0, 0, 1, 1, 3, 3, 4, 4])
    rows = torch.tensor([True, True, False, False, True, True, True, True])
    # kept groups 0, 3, 4 → rank 0: {0, 4}, rank 1: {3}
    assert DataParallel(0, 2).shard(group_ids, rows).tolist() == [1, 1, 0, 0, 0, 0, 1, 1]
    assert DataParallel(1, 2).shard(group_ids, rows).tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
