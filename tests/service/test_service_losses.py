"""The service's named losses, hand-worked on one datum of three positions, and each equal
to rlvr's own surrogate (value and gradient) on the same tensors.

Position 0 is prompt (Â = 0); the sampler gave every target probability 0.5 and the
policy now gives 0.5, 0.55, 0.3, so ρ = π/π_sampler = 1, 1.1, 0.6 and Â = 0, 2, −1.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo.policy.aggregation import aggregate
from rlvr.algo.policy.ratios import sequence_ratio, token_ratio
from rlvr.algo.policy.surrogates import cispo, clip, dual_clip, reinforce
from rlvr.algo.registry import Params
from rlvr.service import Datum, ModelInput
from rlvr.service.datums import pack
from rlvr.service.losses import API_LOSSES, compute_loss, loss_spec, surrogate_params

POLICY = [0.5, 0.55, 0.3]
SAMPLER = [0.5, 0.5, 0.5]
ADVANTAGES = [0.0, 2.0, -1.0]


def policy_batch(loss_fn: str = "ppo"):
    datum = Datum(
        ModelInput.from_ints([1, 2, 3]),
        {
            "target_tokens": [2, 3, 4],
            "logprobs": [math.log(p) for p in SAMPLER],
            "advantages": ADVANTAGES,
        },
    )
    return pack([datum], loss_spec(loss_fn).inputs, vocab_size=10, loss_fn=loss_fn)


def value_and_grad(loss_fn: str, config=None):
    batch = policy_batch(loss_fn) if loss_fn != "cross_entropy" else ce_batch()
    logprobs = torch.tensor([[math.log(p) for p in POLICY]], requires_grad=True)
    loss, value = compute_loss(loss_fn, logprobs, batch, surrogate_params(loss_fn, config))
    (grad,) = torch.autograd.grad(loss, logprobs)
    return value.item(), grad[0].tolist()


def ce_batch():
    datum = Datum(
        ModelInput.from_ints([1, 2, 3]), {"target_tokens": [2, 3, 4], "weights": [0, 1, 1]}
    )
    return pack([datum], ("target_tokens", "weights"), vocab_size=10, loss_fn="cross_entropy")


def test_importance_sampling_hand_worked():
    # value −Σ ρÂ = −(1·0 + 1.1·2 + 0.6·(−1)) = −1.6; ∂/∂logπ = −ρÂ = 0, −2.2, 0.6.
    value, grad = value_and_grad("importance_sampling")
    assert value == pytest.approx(-1.6)
    assert grad == pytest.approx([0.0, -2.2, 0.6])


def test_ppo_hand_worked():
    # ρ = 1.1 < 1.2 stays; ρ = 0.6 < 0.8 with Â < 0 is clipped: −min(−0.6, −0.8) = 0.8,
    # no gradient. Value 0 − 2.2 + 0.8 = −1.4; gradient 0, −2.2, 0.
    value, grad = value_and_grad("ppo")
    assert value == pytest.approx(-1.4)
    assert grad == pytest.approx([0.0, -2.2, 0.0])
    # A tighter high bound clips ρ = 1.1 too: −1.05·2 + 0.8 = −1.3, gradient 0 there.
    value, grad = value_and_grad("ppo", {"clip_high_threshold": 1.05})
    assert value == pytest.approx(-1.3)
    assert grad == pytest.approx([0.0, 0.0, 0.0])


def test_cispo_hand_worked():
    # w = sg(clip(ρ, 0.8, 1.2)) = 1, 1.1, 0.8; loss −Σ w·Â·logπ; ∂/∂logπ = −wÂ = 0, −2.2, 0.8.
    value, grad = value_and_grad("cispo")
    assert value == pytest.approx(-(1.1 * 2 * math.log(0.55) + 0.8 * -1 * math.log(0.3)))
    assert grad == pytest.approx([0.0, -2.2, 0.8])


def test_cross_entropy_hand_worked():
    # −Σ w·logπ over positions 1 and 2 (weight 0 on position 0).
    value, grad = value_and_grad("cross_entropy")
    assert value == pytest.approx(-(math.log(0.55) + math.log(0.3)))
    assert grad == pytest.approx([0.0, -1.0, -1.0])


@pytest.mark.parametrize(
    ("loss_fn", "surrogate", "params"),
    [
        ("importance_sampling", reinforce, Params()),
        ("ppo", clip, Params(clip_low=0.2, clip_high=0.2)),
        ("cispo", cispo, Params(clip_low=0.2, clip_high=0.2)),
        ("clip", clip, Params()),
        ("dual_clip", dual_clip, Params(dual_clip_c=1.5)),
    ],
)
def test_each_loss_is_rlvrs_surrogate(loss_fn, surrogate, params):
    """Same gradient as rlvr's surrogate summed over tokens (same value too, except
    importance_sampling, which reports the remote API's −Σ ρÂ)."""
    batch = policy_batch(loss_fn)
    config = {"dual_clip_c": 1.5} if loss_fn == "dual_clip" else None
    mine = torch.tensor([[math.log(p) for p in POLICY]], requires_grad=True)
    loss, value = compute_loss(loss_fn, mine, batch, surrogate_params(loss_fn, config))
    (grad,) = torch.autograd.grad(loss, mine)
    theirs = torch.tensor([[math.log(p) for p in POLICY]], requires_grad=True)
    old = torch.tensor([[math.log(p) for p in SAMPLER]])
    advantages = torch.tensor([ADVANTAGES])
    ratio = token_ratio(theirs, old, batch.mask)
    reference = aggregate(surrogate(ratio, advantages, theirs, params).loss, batch.mask)
    (expected,) = torch.autograd.grad(reference, theirs)
    torch.testing.assert_close(grad, expected)
    if loss_fn != "importance_sampling":
        assert value.item() == pytest.approx(reference.item())


def test_the_loss_is_a_sum_over_datums():
    """Two copies of the datum: twice the loss of one (no mean over datums or tokens)."""
    one = policy_batch("ppo")
    datum = Datum(
        ModelInput.from_ints([1, 2, 3]),
        {"target_tokens": [2, 3, 4], "logprobs": [math.log(0.5)] * 3, "advantages": ADVANTAGES},
    )
    two = pack([datum, datum], loss_spec("ppo").inputs, vocab_size=10, loss_fn="ppo")
    logprobs = torch.tensor([[math.log(p) for p in POLICY]])
    params = surrogate_params("ppo", None)
    _, single = compute_loss("ppo", logprobs, one, params)
    _, double = compute_loss("ppo", logprobs.repeat(2, 1), two, params)
    assert double.item() == pytest.approx(2 * single.item())


def test_every_api_loss_is_listed():
    assert set(API_LOSSES) == {"cross_entropy", "importance_sampling", "ppo", "cispo", "gspo"}


def gspo_batch():
    """Two datums of one prompt position (its padded sampler log-prob 0, as rl_loop pads)
    and two response positions each, sampled at 0.5."""
    rows = [([0.0, math.log(0.5), math.log(0.5)], [0.0, 2.0, 2.0])] * 2
    datums = [
        Datum(
            ModelInput.from_ints([1, 2, 3]),
            {
                "target_tokens": [2, 3, 4],
                "logprobs": old,
                "advantages": advantages,
                "response_mask": [0, 1, 1],
            },
        )
        for old, advantages in rows
    ]
    datums[1].loss_fn_inputs["advantages"] = [0.0, -1.0, -1.0]
    return pack(datums, loss_spec("gspo").inputs, vocab_size=10, loss_fn="gspo")


GSPO_POLICY = [[0.5, 0.55, 0.6], [0.3, 0.3, 0.3]]


def test_gspo_sequence_ratio_hand_worked():
    # Datum 0: Δ = ln 1.1, ln 1.2 on the response → s = √1.32 = 1.148913 (inside 0.8/1.2);
    #   Â = 2: −s·Â per token, summed over 2 tokens: −4.595652; ∂/∂logπ_t = −Â·s·(1/2)·2
    #   tokens = −2.297825 on each response token. The prompt position (Δ = ln 0.5 against
    #   its padded 0) is outside response_mask: it moves neither s nor the sum.
    # Datum 1: Δ = ln 0.6 twice → s = 0.6; Â = −1: min(−0.6, −0.8) = −0.8 (clipped at
    #   0.8, no gradient) per token: +1.6. Total −2.995652.
    batch = gspo_batch()
    logprobs = torch.tensor(GSPO_POLICY).log().requires_grad_(True)
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    loss, value = compute_loss("gspo", logprobs, batch, surrogate_params("gspo", config))
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert value.item() == pytest.approx(-2.995652, abs=1e-5)
    s = math.sqrt(1.32)
    assert grad.tolist() == [pytest.approx([0.0, -2 * s, -2 * s]), [0.0, 0.0, 0.0]]
    # rlvr's GSPO pieces on the same tensors: sequence ratio, clip surrogate, plain sum.
    mask = batch.inputs["response_mask"]
    logprobs2 = torch.tensor(GSPO_POLICY).log().requires_grad_(True)
    ratio = sequence_ratio(logprobs2, batch.inputs["logprobs"], mask)
    advantages = batch.inputs["advantages"] * mask
    expected = aggregate(clip(ratio, advantages, logprobs2, Params(0.2, 0.2)).loss, mask)
    (expected_grad,) = torch.autograd.grad(expected, logprobs2)
    assert value.item() == pytest.approx(expected.item())
    torch.testing.assert_close(grad, expected_grad)


def test_gspo_defaults_are_rlvrs_gspo_recipe():
    params = surrogate_params("gspo", None)
    assert params.clip_low == pytest.approx(3e-4) and params.clip_high == pytest.approx(4e-4)


def test_gspo_response_mask_must_be_binary():
    datum = Datum(
        ModelInput.from_ints([1, 2]),
        {
            "target_tokens": [2, 3],
            "logprobs": [0, 0],
            "advantages": [0, 1],
            "response_mask": [0, 0.5],
        },
    )
    with pytest.raises(ValueError, match=r"datum 0: loss_fn_inputs\['response_mask'\] holds 0.5"):
        pack([datum], loss_spec("gspo").inputs, vocab_size=10, loss_fn="gspo")
