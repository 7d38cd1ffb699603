"""Peer equality of the rollout corrections (issue 29): every choice a peer implements, fed
the same tensors as a transcription of the peer's function, gives the same weights (and,
through `policy_loss`, the same loss and gradient) within float64 tolerance.

Transcriptions (tests/algo/peers/, headers name file and commit): verl
rollout_corr_helper.py @ b178a3cd56f58b2d502255daba591e92833930a7 (token/sequence TIS,
k1/k2/k3 rejection, off-policy metrics) and @ 9b718e1a7e55fbd974ae13a543e9e6cb89f1f735
(ratio-band rejection, geometric level), verl mismatch_helper.py @
21271aabb90b074d943e7445525cabfec9f316f4 (truncate / clip at token, sequence, geometric);
TRL grpo_trainer.py @ f2cd57710ae345ea6428ae95363267fcf38a3dc8 (vLLM IS modes, off-policy
sequence mask, the dapo loss). Batches: ragged responses with garbage in the padding,
sampler log-probs off by N(0, 0.4) per token, advantages of both signs (one per response).
Where a convention differs the test shows the mapping (docs/conventions.md).
"""

from __future__ import annotations

import pytest
import torch
from algo_testlib import F64, mask_of
from peers import trl_vllm_is_ref as trl
from peers import verl_rollout_corr_ref as verl

from rlvr.algo import get_recipe, policy_loss
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.rollout_correction import (
    REJECT_STATISTICS,
    ROLLOUT_CORRECTIONS,
    divergence_rejection_mask,
    mismatch_sums,
    offpolicy_sequence_mask,
)

SEEDS = [0, 1, 2, 3]
LENGTHS = [3, 7, 1, 5, 6, 2, 4, 7]
GARBAGE = 7.0  # in the padding of every log-prob tensor: it must never count


def batch(seed: int, spread: float = 0.4):
    """old (π_old), sampler, logprobs (π_θ), mask, per-response advantages."""
    g = torch.Generator().manual_seed(seed)
    mask = mask_of(LENGTHS)
    shape = mask.shape

    def logprobs(scale: float = 1.0) -> torch.Tensor:
        return -torch.rand(shape, generator=g, dtype=F64) * 2 * scale - 0.05

    old = logprobs()
    sampler = old + spread * torch.randn(shape, generator=g, dtype=F64)
    current = old + 0.1 * torch.randn(shape, generator=g, dtype=F64)
    pad = mask == 0
    old, sampler, current = (x.masked_fill(pad, GARBAGE) for x in (old, sampler, current))
    advantages = torch.randn(len(LENGTHS), generator=g, dtype=F64)
    return old, sampler, current, mask, advantages


def weight(choice: str, old, sampler, mask, lower, upper) -> torch.Tensor:
    return ROLLOUT_CORRECTIONS.get(choice).fn(old, sampler, mask, lower, upper)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-10) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("level", "cap"), [("token", 2.0), ("sequence", 2.0), ("sequence", 5.0)])
def test_tis_equals_verl_and_trl_truncate(seed, level, cap):
    old, sampler, _, mask, _ = batch(seed)
    ours = weight(f"{level}_tis", old, sampler, mask, None, cap)
    close(ours, verl.compute_rollout_correction_weights(old - sampler, mask, level, cap))
    mode = f"{level}_truncate"
    theirs = trl.vllm_importance_sampling_ratio(old, sampler, mask, mode, None, cap)
    close(ours, theirs.expand_as(mask) * mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
@pytest.mark.parametrize("mode", ["truncate", "clip"])
def test_tis_and_mis_equal_verl_mismatch_helper(seed, level, mode):
    """verl's first rollout-IS API: 'truncate' caps at the upper bound only (TIS); 'clip'
    zeroes weights outside [lower, upper] (rlvr's MIS)."""
    old, sampler, _, mask, _ = batch(seed)
    theirs = verl.compute_rollout_importance_weights(old, sampler, mask, level, mode, 2.0, 0.6)
    choice, lower = (f"{level}_tis", None) if mode == "truncate" else (f"{level}_mis", 0.6)
    # verl's masked_mean divides by |y| + 1e-8: a relative 1e-8/|y| at the geometric level
    close(weight(choice, old, sampler, mask, lower, 2.0), theirs, rtol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(("lower", "upper"), [(None, 3.0), (0.5, 3.0), (0.8, None)])
def test_mis_equals_trl_mask_modes(seed, level, lower, upper):
    old, sampler, _, mask, _ = batch(seed)
    theirs = trl.vllm_importance_sampling_ratio(old, sampler, mask, f"{level}_mask", lower, upper)
    close(weight(f"{level}_mis", old, sampler, mask, lower, upper), theirs.expand_as(mask) * mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncation_from_below_equals_trl(seed, level):
    old, sampler, _, mask, _ = batch(seed)
    theirs = trl.vllm_importance_sampling_ratio(old, sampler, mask, f"{level}_truncate", 0.7, 1.5)
    close(weight(f"{level}_tis", old, sampler, mask, 0.7, 1.5), theirs.expand_as(mask) * mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_rejection_equals_verl_ratio_band(seed, level):
    old, sampler, _, mask, _ = batch(seed)
    theirs = verl.compute_rollout_rejection_mask_ratio(old - sampler, mask, level, 1.5, 0.6)
    close(weight(f"{level}_rs", old, sampler, mask, 0.6, 1.5), theirs)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("level", "option"), [("token", "token_k1"), ("sequence", "seq_sum_k1"),
                                               ("geometric", "seq_mean_k1")])  # fmt: skip
@pytest.mark.parametrize(("lower", "upper"), [(0.5, 2.0), (0.6, 1.4), (0.999, 1.001)])
def test_rejection_equals_verl_k1_with_the_band_inverted(seed, level, option, lower, upper):
    """verl's current k1 options bound k1 = −log ρ by log of "L_U", i.e. ρ ∈ [1/U, 1/L]:
    rlvr's band [lower, upper] on ρ = π_old/π_sampler is verl's "1/upper_1/lower". For a
    symmetric band (L = 1/U, verl's presets) the two spellings coincide."""
    old, sampler, _, mask, _ = batch(seed, spread=0.05 if upper < 1.01 else 0.4)
    spec = f"{1 / upper!r}_{1 / lower!r}"
    theirs = verl.compute_rollout_rejection_mask(old - sampler, mask, option, spec)
    close(weight(f"{level}_rs", old, sampler, mask, lower, upper), theirs)


@pytest.mark.parametrize("seed", SEEDS)
def test_verl_seq_mis_preset_is_sequence_mis(seed):
    """verl's `decoupled_seq_is_rs()` (Seq-MIS): sequence TIS at 2 times seq_sum_k1
    rejection "0.5_2.0" is ρ·1[0.5 ≤ ρ ≤ 2]: rollout_correction=sequence_mis on [0.5, 2]."""
    old, sampler, _, mask, _ = batch(seed)
    tis = verl.compute_rollout_correction_weights(old - sampler, mask, "sequence", 2.0)
    keep = verl.compute_rollout_rejection_mask(old - sampler, mask, "seq_sum_k1", "0.5_2.0")
    close(weight("sequence_mis", old, sampler, mask, 0.5, 2.0), tis * keep)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("statistic", REJECT_STATISTICS)
def test_divergence_rejection_equals_verl(seed, statistic):
    old, sampler, _, mask, _ = batch(seed)
    kept = []
    for threshold in (0.02, 0.1, 0.5):
        theirs = verl.compute_rollout_rejection_mask(old - sampler, mask, statistic, threshold)
        ours = divergence_rejection_mask(old, sampler, mask, statistic, threshold)
        close(ours, theirs)
        kept.append(float(ours.sum() / mask.sum()))
    assert any(0 < k < 1 for k in kept)  # some threshold cuts part of the batch


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("delta", [0.0, 0.05, 0.3])
def test_offpolicy_mask_equals_trl(seed, delta):
    _, sampler, current, mask, advantages = batch(seed)
    theirs = trl.get_off_policy_mask(advantages[:, None], current, sampler, mask, delta)
    token_adv = advantages[:, None] * mask
    ours = offpolicy_sequence_mask(current, sampler, token_adv, mask, delta)
    close(ours, theirs.expand_as(mask) * mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_mismatch_metrics_equal_verl_and_trl(seed):
    """rollout/mismatch_k1 is verl's rollout_corr/kl (mean log π_sampler − log π_old),
    _k3 its k3_kl, _max_abs_log_ratio TRL's sampling/sampling_logp_difference/max."""
    old, sampler, _, mask, _ = batch(seed)
    sums, largest = mismatch_sums(old, sampler, mask)
    metric = {k: float(n / d) for k, (n, d) in sums.items()}
    # verl divides by count + 1e-8
    peer = verl.compute_offpolicy_metrics(old, sampler, mask)
    assert metric["k1"] == pytest.approx(peer["kl"], rel=1e-7)
    assert metric["k3"] == pytest.approx(peer["k3_kl"], rel=1e-7)
    _, trl_max = trl.sampling_logp_difference(old, sampler, mask)
    assert float(largest) == pytest.approx(float(trl_max), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("delta", [None, 0.05])
def test_grpo_trl_vllm_loss_and_gradient_equal_trl(seed, delta):
    """The recipe grpo_trl_vllm through `policy_loss` (token_mean = TRL's dapo loss over
    one micro-batch) against TRL's _compute_loss with its default vLLM correction
    (sequence_mask, cap 3) and, optionally, off_policy_mask_threshold δ."""
    old, sampler, current, mask, advantages = batch(seed)
    sampler = sampler - 0.5 * mask * (torch.arange(len(LENGTHS)) == 1)[:, None]  # ρ_1 > 3
    recipe = get_recipe("grpo_trl_vllm", offpolicy_mask_delta=delta)
    group_ids = torch.arange(len(LENGTHS)) // 2
    ours_leaf = current.clone().requires_grad_(True)
    loss, _ = policy_loss(
        recipe,
        logprobs=ours_leaf,
        old_logprobs=old,
        advantages=advantages[:, None] * mask,
        loss_weights=aggregation_weights(recipe.aggregation, mask, group_ids, mask.shape[1]),
        response_mask=mask,
        sampler_logprobs=sampler,
    )
    (ours_grad,) = torch.autograd.grad(loss, ours_leaf)
    theirs_leaf = current.clone().requires_grad_(True)
    ratio = trl.vllm_importance_sampling_ratio(old, sampler, mask)
    theirs = trl.dapo_loss(theirs_leaf, old, advantages, mask, ratio, sampler, delta)
    (theirs_grad,) = torch.autograd.grad(theirs, theirs_leaf)
    close(loss, theirs)
    close(ours_grad * mask, theirs_grad * mask)
    assert (ratio == 0).any()  # the cap acts: responses with Π ρ > 3 are dropped
