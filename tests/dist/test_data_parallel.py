"""Two gloo ranks, each computing its share of the prompt groups, produce the gradient and
the updated weights of one process training on the whole batch (rlvr/train/distributed/ddp.py).

The two sides add each gradient in another order (each rank sums its rows, then the ranks
are summed), so they agree to float32 rounding, and AdamW's first step, lr·g/(|g| + ε),
magnifies that rounding 1e6-fold in a gradient near 0 (rounding_testlib.py). So the check
is made step by step: at every optimizer step the one process is handed the ranks'
weights (`forced`), its gradient there must equal the ranks' to the rounding bound of a
reordered sum, and the ranks' weights must be exactly AdamW's step with the ranks'
gradients, replayed here (`_replay`)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rounding_testlib import EPS32, assert_within, forward_terms, reorder_atol

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
CONFIG = tiny_qwen2_config(20, hidden=16, layers=1, heads=2, kv_heads=2, intermediate=32)
LR = 1e-2


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


def _update(case, data_parallel, shard=None, forced=None):
    """One rollout batch's update; returns (gradients, weights, metrics, steps) after it,
    `steps` holding each optimizer step's (gradients, weights). `shard(model)`: shard the
    model before the optimizer is built (tests/dist/test_fsdp.py). `forced`: another
    update's `steps`; after each step the weights are set to that update's, so that every
    step's gradient is taken at the other update's weights."""
    name, overrides, minibatches = case
    recipe = get_recipe(name, **overrides)
    model = build_tiny_policy(CONFIG, seed=3)
    if shard is not None:
        shard(model)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=LR)
    steps = []

    def record(*_):
        steps.append(([p.grad.clone() for p in params], [p.detach().clone() for p in params]))
        if forced is not None:
            with torch.no_grad():
                for p, w in zip(params, forced[len(steps) - 1][1], strict=True):
                    p.copy_(w)

    optimizer.register_step_post_hook(record)
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
    grads = [p.grad.clone() for p in params]
    weights = [p.detach().clone() for p in params]
    return grads, weights, metrics, steps


def _replay(steps) -> list[list[torch.Tensor]]:
    """The weights after each step of AdamW (lr = `LR`) from the initial weights, fed the
    gradients of `steps`."""
    model = build_tiny_policy(CONFIG, seed=3)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=LR)
    weights = []
    for grads, _ in steps:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        weights.append([p.detach().clone() for p in params])
    return weights


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


# A gradient element sums one term per response token of the batch (GROUPS·G·T = 90 at
# most), each through the forward and backward chain of `forward_terms(CONFIG)` = 404
# additions, which the two sides round in other orders (other batch shapes, other rows per
# sum): n = 494, and M the largest |gradient| of the tensor, taking its terms to be of the
# gradient's own size (n·ε is the worst case of n roundings; √n·u, their typical sum,
# leaves a factor 2√n ≈ 44 for cancellation among the terms).
GRAD_TERMS = GROUPS * G * T + forward_terms(CONFIG)


def assert_equals_one_process(result, case) -> None:
    """At each optimizer step of a multi-rank update of `case`, the gradient, and the loss
    metrics, equal one process's at the same weights, and the weights are AdamW's step with
    that gradient (see the module docstring)."""
    *_, metrics, steps = result
    ref_grads, _, ref_metrics, ref_steps = _update(case, None, forced=steps)
    assert len(steps) == len(ref_steps) == case[2]
    assert any(g.abs().sum() > 0 for g in ref_grads)  # the check compares something
    for k, ((grads, weights), (ref, _), replayed) in enumerate(
        zip(steps, ref_steps, _replay(steps), strict=True)
    ):
        for i, (a, b) in enumerate(zip(grads, ref, strict=True)):
            assert_within(
                a, b, reorder_atol(GRAD_TERMS, b.abs().max().item()), f"step {k} grad {i}:"
            )
        for i, (a, b) in enumerate(zip(weights, replayed, strict=True)):
            # The same elementwise AdamW arithmetic on whole tensors here and on the ranks'
            # (FSDP: row shards'), whose vectorised bodies and scalar tails may contract a
            # multiply-add differently: ½ ulp for each of decay and w − step (ε·|w|), and
            # for each of the step's 6 operations on lr·|m̂/(√v̂ + ε)| ≤ 2·lr (6·ε·lr), per
            # step taken so far.
            atol = (k + 1) * EPS32 * (b.abs() + 6 * LR)
            assert_within(a, b, atol, f"step {k} weight {i}:")
    # loss/policy = Σₜ wₜ·Âₜ·ρₜ with ρ = 1 exactly on-policy, Σw ≤ 1 and |Â| ≤ √2 (a z-scored
    # group of 3): M = 2. clip/ratio_mean averages ratios of exactly 1: M = 1. The norm moves
    # by at most ‖Δg‖ ≤ √Σ(each element's bound²), plus its own sum of squares' rounding
    # (numel terms, M = the norm).
    # The norm is the one before clipping (to 1.0), the recorded gradients after it.
    norm = ref_metrics["train/grad_norm"]
    grad_error = max(
        sum(g.numel() * reorder_atol(GRAD_TERMS, g.abs().max().item()) ** 2 for g in grads)
        for grads, _ in ref_steps
    ) ** 0.5 * max(norm, 1.0)
    numel = sum(g.numel() for g in ref_grads)
    bounds = {
        "loss/policy": reorder_atol(GRAD_TERMS, 2.0),
        "train/grad_norm": grad_error + reorder_atol(numel, norm),
        "clip/ratio_mean": reorder_atol(GRAD_TERMS, 1.0),
    }
    for key, bound in bounds.items():
        if key in ref_metrics:
            assert abs(metrics[key] - ref_metrics[key]) <= bound, (key, metrics[key], ref_metrics)


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
