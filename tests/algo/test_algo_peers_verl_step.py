"""Issue 43, items 1, 3 and 6: rejection, GMPO's folded correction and Dr. GRPO's
normaliser, as verl computes them today.

verl (verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9, transcribed in
tests/algo/peers/verl_fidelity_ref.py) rejects by *editing* `response_mask` before the
advantages and the loss (`compute_rollout_correction_and_add_to_batch` in ray_trainer's
step, then `ppo_loss`): a rejected token leaves the token-mean count, a response rejected
whole leaves the sequence count, and its KL and entropy terms go too; IS weights stay
weights, computed on the mask as sampled. GMPO (`compute_policy_loss_geo_mean`) folds
token weights into one per response by exp(mean log(w + 1e-10)); `agg_loss`'s
"seq-mean-token-sum-norm" divides by the number of sequences since #5366. rlvr goes through
`prepare_batch` (the loop's order) and `policy_loss`, fed the same tensors.

Batches: 8 ragged responses in 4 groups of 2, distinct rewards, loud garbage in the
padding, sampler log-probs off by N(0, 0.4) per token, several seeds.
"""

from __future__ import annotations

import math

import pytest
import torch
from algo_testlib import F64, mask_of
from peers import trl_grpo_ref as trl
from peers import verl_core_algos_ref as verl_b178
from peers import verl_fidelity_ref as verl

from rlvr.algo import get_recipe, policy_loss, prepare_batch, selection_metrics
from rlvr.algo.policy.aggregation import aggregate, aggregation_weights
from rlvr.algo.policy.rollout_correction import geometric_fold

SEEDS = [0, 1, 2, 3]
LENGTHS = [4, 7, 1, 5, 6, 2, 4, 7]
GROUPS = torch.arange(len(LENGTHS)) // 2
BUDGET = 10  # max_new_tokens


def batch(seed: int, spread: float = 0.4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = mask_of(LENGTHS)

    def noise(scale: float) -> torch.Tensor:
        return scale * torch.randn(mask.shape, generator=g, dtype=F64)

    old = -2.0 * torch.rand(mask.shape, generator=g, dtype=F64) - 0.05
    b = {
        "mask": mask,
        "old": old,
        "sampler": old + noise(spread),
        "current": old + noise(0.1),
        "ref": old + noise(0.3),
        "entropy": 3.0 * torch.rand(mask.shape, generator=g, dtype=F64),
        "rewards": torch.randn(len(LENGTHS), generator=g, dtype=F64),
    }
    pad = mask == 0
    for key, garbage in (("old", 7.0), ("sampler", -3.0), ("current", 5.0), ("ref", 2.0)):
        b[key] = b[key].masked_fill(pad, garbage)  # loud padding: nothing may read it
    return b


def rlvr_step(recipe, b: dict[str, torch.Tensor]):
    """The loop's order: prepare_batch (rejection, advantages, weights), then policy_loss;
    returns (loss, ∂loss/∂logπ, the prepared batch, the metrics)."""
    prepared = prepare_batch(
        recipe,
        rewards=b["rewards"],
        correct=(b["rewards"] > 0).to(F64),
        truncated=torch.zeros(len(LENGTHS), dtype=torch.bool),
        response_mask=b["mask"],
        group_ids=GROUPS,
        max_new_tokens=BUDGET,
        old_logprobs=b["old"],
        ref_logprobs=b["ref"],
        sampler_logprobs=b["sampler"],
    )
    leaf = b["current"].clone().requires_grad_(True)
    loss, stats = policy_loss(
        recipe,
        logprobs=leaf,
        old_logprobs=b["old"],
        advantages=prepared.advantages,
        loss_weights=prepared.loss_weights,
        response_mask=prepared.response_mask,
        ref_logprobs=b["ref"],
        sampler_logprobs=b["sampler"],
        entropy=b["entropy"],
        sampled_mask=prepared.sampled_mask,
    )
    loss.backward()
    metrics = {**selection_metrics(prepared, GROUPS), **stats.finalize()}
    return loss.detach(), leaf.grad, prepared, metrics


def verl_step(b: dict[str, torch.Tensor], **kwargs):
    leaf = b["current"].clone().requires_grad_(True)
    loss = verl.ppo_step(
        leaf,
        b["old"],
        b["sampler"],
        b["ref"],
        b["entropy"],
        b["rewards"].clone(),
        GROUPS.tolist(),
        b["mask"],
        **kwargs,
    )
    loss.backward()
    return loss.detach(), torch.where(torch.isnan(leaf.grad), 0.0, leaf.grad)


def assert_same(ours, theirs, mask) -> None:
    """Loss and gradient equal to 1e-6 relative. The two sides differ only by verl's
    divisions by (count + 1e-8) (a relative 1e-8 per response) and float64 summation order
    (~1e-16 × tens of terms); cancellation between signed terms can lift a relative 1e-8
    to ~1e-7 of a small total, so 1e-6 relative (1e-9 absolute near 0) still fails any
    difference of method, which shows at 1e-3 or more."""
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[1] * mask, theirs[1] * mask, rtol=1e-6, atol=1e-9)
    assert torch.all(ours[1][mask == 0] == 0)


# rlvr choice ↔ verl `rollout_rs` options. rlvr's band [L, U] on ρ = π_old/π_sampler is
# verl's k1 threshold "1/U_1/L" (tests/algo/test_rollout_correction_peers.py shows it).
CASES = {
    "token_rs": (
        {"rollout_correction": "token_rs", "rc_lower": 0.6, "rc_upper": 1.5},
        {"rollout_rs": [("token_k1", f"{1 / 1.5!r}_{1 / 0.6!r}")]},
    ),
    "sequence_rs": (
        {"rollout_correction": "sequence_rs", "rc_lower": 0.58, "rc_upper": 1.72},
        {"rollout_rs": [("seq_sum_k1", f"{1 / 1.72!r}_{1 / 0.58!r}")]},
    ),
    "geometric_rs": (
        {"rollout_correction": "geometric_rs", "rc_lower": 0.87, "rc_upper": 1.15},
        {"rollout_rs": [("seq_mean_k1", f"{1 / 1.15!r}_{1 / 0.87!r}")]},
    ),
    "reject_token_k3": (
        {"rc_reject": "token_k3", "rc_reject_max": 0.05},
        {"rollout_rs": [("token_k3", 0.05)]},
    ),
    "reject_seq_mean_k2": (
        {"rc_reject": "seq_mean_k2", "rc_reject_max": 0.08},
        {"rollout_rs": [("seq_mean_k2", 0.08)]},
    ),
    # IS weights stay weights; the rejection edits the mask on top.
    "token_tis+reject_token_k2": (
        {"rollout_correction": "token_tis", "rc_upper": 2.0},
        {"rollout_is": "token", "rollout_is_threshold": 2.0},
    ),
    # a sequence weight Π_t ρ_t over every sampled token, rejected ones included (verl)
    "sequence_tis+reject_token_k3": (
        {"rollout_correction": "sequence_tis", "rc_upper": 5.0},
        {"rollout_is": "sequence", "rollout_is_threshold": 5.0},
    ),
}
CASES["token_tis+reject_token_k2"][0].update(rc_reject="token_k2", rc_reject_max=0.05)
CASES["token_tis+reject_token_k2"][1].update(rollout_rs=[("token_k2", 0.05)])
CASES["sequence_tis+reject_token_k3"][0].update(rc_reject="token_k3", rc_reject_max=0.05)
CASES["sequence_tis+reject_token_k3"][1].update(rollout_rs=[("token_k3", 0.05)])
AGGREGATIONS = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_rejection_equals_verls_mask_edit(seed, case, aggregation):
    """GRPO with verl's default loss (dual clip), its KL loss (k3, 0.04) and an entropy
    bonus: the rejected tokens leave advantages, every normaliser, the KL and the entropy."""
    ours_fields, verl_fields = CASES[case]
    recipe = get_recipe(
        "grpo", surrogate="dual_clip", aggregation=aggregation, entropy_coef=0.01, **ours_fields
    )
    b = batch(seed)
    loss, grad, prepared, metrics = rlvr_step(recipe, b)
    theirs = verl_step(
        b,
        loss_agg_mode=AGGREGATIONS[aggregation],
        kl_loss_coef=0.04,
        entropy_coeff=0.01,
        **verl_fields,
    )
    assert_same((loss, grad), theirs, b["mask"])
    valid = int(b["mask"].sum())
    rejected = int(prepared.rejected.sum())
    assert 0 < rejected < valid  # the rejection cut part of the batch, not all of it
    assert metrics["rollout/rejected_token_frac"] == pytest.approx(rejected / valid, rel=1e-15)
    assert torch.all(grad[prepared.rejected] == 0)  # gone from the KL and entropy terms too


def test_some_cases_reject_whole_responses():
    # A response rejected whole leaves the sequence count (seq_mean_token_mean above).
    whole = 0
    for seed in SEEDS:
        for case in ("sequence_rs", "geometric_rs", "reject_seq_mean_k2"):
            prepared = rlvr_step(get_recipe("grpo", **CASES[case][0]), batch(seed))[2]
            rows = prepared.rejected.any(-1) & (prepared.response_mask.sum(-1) == 0)
            whole += int(rows.sum())
            assert prepared.keep.all()  # the batch still trains: those rows just have no token
    assert whole >= 4


def test_one_rejected_token_of_four_by_hand():
    """One group: response 0 of 4 tokens (reward 1), response 1 of 2 (reward 0);
    on-policy (π = π_old), and the sampler gave token 2 of response 0 a log-prob 1 lower:
    ρ = e^1 = 2.72 > U = 2, rejected by token_rs; every other ρ = 1.
    Â = ±0.5/(std + 1e-6), std = √0.5 = 0.70711 (unbiased, n = 2): Â = ±0.70711.
    On-policy the clipped loss is −Â per token, so with token_mean over the 5 kept tokens
    L = (3·(−0.70711) + 2·(+0.70711))/5 = −0.141421, ∂L/∂logπ = −Â/5 = ∓0.141421 on the
    kept tokens and 0 on the rejected one. (Multiplying only its policy term by 0, as rlvr
    did before, kept 6 in the count: L = −0.70711/6 = −0.117851.)"""
    mask = mask_of([4, 2])
    logprobs = torch.full(mask.shape, -1.0, dtype=F64)
    sampler = logprobs.clone()
    sampler[0, 2] = -2.0
    recipe = get_recipe(
        "grpo", kl=None, kl_coef=0.0, aggregation="token_mean", rollout_correction="token_rs"
    )
    prepared = prepare_batch(
        recipe,
        rewards=torch.tensor([1.0, 0.0], dtype=F64),
        correct=torch.tensor([1.0, 0.0], dtype=F64),
        truncated=torch.zeros(2, dtype=torch.bool),
        response_mask=mask,
        group_ids=torch.zeros(2, dtype=torch.long),
        max_new_tokens=4,
        old_logprobs=logprobs,
        sampler_logprobs=sampler,
    )
    leaf = logprobs.clone().requires_grad_(True)
    loss, _ = policy_loss(
        recipe,
        logprobs=leaf,
        old_logprobs=logprobs,
        advantages=prepared.advantages,
        loss_weights=prepared.loss_weights,
        response_mask=prepared.response_mask,
        sampler_logprobs=sampler,
        sampled_mask=prepared.sampled_mask,
    )
    loss.backward()
    adv = 0.5 / (math.sqrt(0.5) + 1e-6)
    # float64 throughout: a handful of exactly representable terms, rounding ~1e-16
    assert float(loss) == pytest.approx(-adv / 5, rel=1e-12)
    expected = torch.tensor([[-1, -1, 0, -1], [1, 1, 0, 0]], dtype=F64) * adv / 5
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-12, atol=0)
    assert prepared.rejected.tolist() == [[False, False, True, False], [False] * 4]


def test_every_token_rejected_skips_the_batch_instead_of_nan():
    """A band no token's ρ falls in rejects everything: verl's token-mean is then 0/0 =
    NaN; rlvr keeps no row (the loop skips the update and logs train/update_skipped = 1),
    and a loss computed anyway is exactly 0 with a zero gradient."""
    recipe = get_recipe("grpo", rollout_correction="token_rs", rc_lower=5.0, rc_upper=6.0)
    b = batch(0)
    loss, grad, prepared, metrics = rlvr_step(recipe, b)
    assert not prepared.keep.any()
    assert float(loss) == 0.0 and torch.all(grad == 0)
    assert metrics["rollout/rejected_token_frac"] == 1.0
    assert metrics["rollout/rejected_response_frac"] == 1.0
    assert metrics["rollout/kept_responses"] == 0.0
    theirs = verl_step(b, rollout_rs=[("token_k1", f"{1 / 6.0!r}_{1 / 5.0!r}")])
    assert torch.isnan(theirs[0])


def test_without_sampler_logprobs_nothing_is_rejected():
    # `rlvr audit` has no sampler log-probs: the recipe runs as if uncorrected.
    b = batch(1)
    recipe = get_recipe("grpo", rollout_correction="token_rs", rc_lower=0.9, rc_upper=1.1)
    prepared = prepare_batch(
        recipe,
        rewards=b["rewards"],
        correct=(b["rewards"] > 0).to(F64),
        truncated=torch.zeros(len(LENGTHS), dtype=torch.bool),
        response_mask=b["mask"],
        group_ids=GROUPS,
        max_new_tokens=BUDGET,
        old_logprobs=b["old"],
    )
    assert prepared.rejected is None and torch.equal(prepared.response_mask, b["mask"])


def test_rejection_needs_pi_old():
    b = batch(2)
    with pytest.raises(ValueError, match="prepare_batch needs old_logprobs"):
        prepare_batch(
            get_recipe("grpo", rc_reject="token_k3", rc_reject_max=0.1),
            rewards=b["rewards"],
            correct=b["rewards"] > 0,
            truncated=torch.zeros(len(LENGTHS), dtype=torch.bool),
            response_mask=b["mask"],
            group_ids=GROUPS,
            max_new_tokens=BUDGET,
            sampler_logprobs=b["sampler"],
        )


def test_rejection_precedes_token_level_advantages():
    """REINFORCE++ (reward-to-go and whitening over the mask) with a rejection equals the
    same batch handed in with the rejected tokens already out of its mask."""
    b = batch(3)
    recipe = get_recipe("reinforce_pp", rc_reject="token_k3", rc_reject_max=0.05)
    prepared = rlvr_step(recipe, b)[2]
    edited = prepare_batch(
        get_recipe("reinforce_pp"),
        rewards=b["rewards"],
        correct=(b["rewards"] > 0).to(F64),
        truncated=torch.zeros(len(LENGTHS), dtype=torch.bool),
        response_mask=prepared.response_mask,
        group_ids=GROUPS,
        max_new_tokens=BUDGET,
        old_logprobs=b["old"],
        ref_logprobs=b["ref"],
        lengths=b["mask"].sum(-1),
    )
    assert prepared.rejected.any()
    torch.testing.assert_close(prepared.advantages, edited.advantages, rtol=0, atol=0)
    torch.testing.assert_close(prepared.loss_weights, edited.loss_weights, rtol=0, atol=0)


# ------------------------------------------------------------------ GMPO (item 3)


def test_geometric_fold_by_hand():
    """Token weights (2, 0.5, 1, 1): geometric mean (2·0.5·1·1)^(1/4) = 1 (an arithmetic
    mean, which broadcasting a token weight over GMPO's one loss per response amounts to,
    gives 1.125); (4, 1) over 2 tokens: √4 = 2. The +1e-10 moves a weight of 1 by 1e-10."""
    weight = torch.tensor([[2.0, 0.5, 1.0, 1.0], [4.0, 1.0, 0.0, 0.0]], dtype=F64)
    mask = mask_of([4, 2])
    folded = geometric_fold(weight, mask)
    expected = torch.tensor([[1.0] * 4, [2.0, 2.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(folded, expected, rtol=1e-9, atol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("ours_fields", "verl_fields"),
    [
        ({"rollout_correction": "token_tis"}, {"rollout_is": "token"}),
        # a sequence weight is already one per response: rlvr applies it as it is, verl's
        # fold gives w + 1e-10 (far inside the tolerance)
        (
            {"rollout_correction": "sequence_tis", "rc_upper": 5.0},
            {"rollout_is": "sequence", "rollout_is_threshold": 5.0},
        ),
        # token rejection: the rejected tokens leave the geometric mean itself
        (
            {"rollout_correction": "token_rs", "rc_lower": 0.6, "rc_upper": 1.5},
            {"rollout_rs": [("token_k1", f"{1 / 1.5!r}_{1 / 0.6!r}")]},
        ),
    ],
)
def test_gmpo_correction_equals_verl_geo_mean(seed, ours_fields, verl_fields):
    b = batch(seed)
    loss, grad, prepared, _ = rlvr_step(get_recipe("gmpo", **ours_fields), b)
    theirs = verl_step(b, loss_mode="geo_mean", clip_ratio=0.4, **verl_fields)
    # verl's geo_mean takes torch.mean over every row, a response rejected whole included
    # (its loss is 0); rlvr's seq_mean_token_mean counts responses with a token
    # (docs/conventions.md): rlvr = verl · B / N_seq.
    rows = len(LENGTHS)
    n_seq = int((prepared.response_mask.sum(-1) > 0).sum())
    assert_same((loss, grad), (theirs[0] * rows / n_seq, theirs[1] * rows / n_seq), b["mask"])
    uncorrected = rlvr_step(get_recipe("gmpo"), b)
    assert not torch.allclose(uncorrected[0], loss)


# ------------------------------------------------------------------ Dr. GRPO (item 6)


@pytest.mark.parametrize("seed", SEEDS)
def test_dr_grpo_normaliser_equals_verl_today_and_maps_to_trl(seed):
    """rlvr `constant`: Σ ℓ / (N_seq · L_budget). verl @ 1dda039b `seq-mean-token-sum-norm`
    is Σ ℓ / N_seq / loss_scale_factor (N_seq: responses with a token): the same with
    loss_scale_factor = max_new_tokens (its default is the padded length T). verl @
    b178a3cd divided by loss_scale_factor only (rlvr · N_seq). TRL `dr_grpo`:
    Σ ℓ / (B · max_completion_length), B every row of the micro-batch, an empty one too
    (rlvr · N_seq / B)."""
    g = torch.Generator().manual_seed(seed)
    mask = mask_of(LENGTHS)
    mask[3] = 0.0  # a response with no token left (overlong-filtered, rejected whole)
    loss_mat = torch.randn(mask.shape, generator=g, dtype=F64)
    ours = aggregate(loss_mat, aggregation_weights("constant", mask, GROUPS, BUDGET))
    n_seq, rows, padded = 7, len(LENGTHS), mask.shape[1]
    # float64 sums of ≤ 56 terms of size ~1: rounding ~1e-14, far below 1e-12
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)  # noqa: E731
    close(ours, verl.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", loss_scale_factor=BUDGET))
    close(ours * BUDGET / padded, verl.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm"))
    old = verl_b178.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", loss_scale_factor=BUDGET)
    close(ours * n_seq, old)
    close(ours * n_seq / rows, (loss_mat * mask).sum() / (rows * BUDGET))  # TRL's dr_grpo


@pytest.mark.parametrize("seed", SEEDS)
def test_dr_grpo_loss_equals_verl_and_trl(seed):
    """The `dr_grpo` recipe end to end: Â = r − mean_g r (verl norm_adv_by_std_in_grpo
    False; TRL scale_rewards "none"), verl's default dual clip, and the normaliser above
    with every row holding a token (so TRL's B = N_seq)."""
    b = batch(seed)
    recipe = get_recipe("dr_grpo", surrogate="dual_clip")
    loss, grad, prepared, _ = rlvr_step(recipe, b)
    theirs = verl_step(
        b,
        loss_agg_mode="seq-mean-token-sum-norm",
        norm_adv_by_std_in_grpo=False,
        loss_scale_factor=BUDGET,
    )
    assert_same((loss, grad), theirs, b["mask"])
    leaf = b["current"].clone().requires_grad_(True)
    trl_loss = trl.compute_loss(
        leaf,
        b["old"],
        prepared.advantages,
        b["mask"],
        loss_type="dr_grpo",
        max_completion_length=BUDGET,
    )
    trl_loss.backward()
    clip = get_recipe("dr_grpo")  # TRL has no dual clip: compare with rlvr's plain clip
    plain = rlvr_step(clip, b)
    assert_same(plain[:2], (trl_loss.detach(), leaf.grad), b["mask"])
