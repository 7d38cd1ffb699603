"""Which KL gradient each KL form gives (docs/algorithms.md §5, "Which KL gradient"; TRL
#4967), computed *exactly*: a two-token categorical policy over a 3-token vocabulary, every
one of the 9 responses enumerated, each estimator's expected gradient Σ_y π(y)·∇ℓ(y) with
π(y) the (stop-gradient) sampling probability.

Targets: the sequence KL(π‖π_ref) = Σ_y π(y) log π(y)/π_ref(y) differentiated by autograd;
the "local" forward and reverse KLs Σ_x sg(π(x))·KL(π(·|x)‖π_ref(·|x)) (resp. KL(π_ref‖π)),
one term per prefix x, the prefix's probability held fixed.
"""

from __future__ import annotations

import itertools

import torch

from rlvr.algo.regularizers import importance_corrected, kl_k1, kl_k2, kl_k3, kl_k3_k2_grad

V = 3
F64 = torch.float64


def setup(seed: int):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(1 + V, V, generator=gen, dtype=F64).requires_grad_(True)  # row 0: t=1
    ref = torch.randn(1 + V, V, generator=gen, dtype=F64)  # row 1+y1: t=2 after y1
    return theta, ref


def token_logprobs(logits, y):
    """(log π(y1), log π(y2 | y1)) of one response under a table of logits."""
    first = torch.log_softmax(logits[0], -1)[y[0]]
    second = torch.log_softmax(logits[1 + y[0]], -1)[y[1]]
    return torch.stack([first, second])


def responses():
    return list(itertools.product(range(V), repeat=2))


def grad(expr, theta):
    (g,) = torch.autograd.grad(expr, theta)
    return g


def expected_gradient(theta, ref, per_response):
    """Σ_y sg(π(y))·∇ℓ(y), ℓ(y) = per_response(logπ_t (2,), logπ_ref_t (2,))."""
    total = 0.0
    for y in responses():
        lp, lr = token_logprobs(theta, y), token_logprobs(ref, y)
        total = total + lp.sum().exp().detach() * per_response(lp, lr)
    return grad(total, theta)


def sequence_kl(theta, ref):
    total = 0.0
    for y in responses():
        lp, lr = token_logprobs(theta, y), token_logprobs(ref, y)
        total = total + lp.sum().exp() * (lp.sum() - lr.sum())
    return total


def local_kl(theta, ref, reverse: bool):
    """Σ_x sg(π(x))·KL at prefix x: x = ∅ (weight 1) and x = y1 (weight π(y1))."""
    first = torch.log_softmax(theta[0], -1)
    total = 0.0
    for row, weight in [(0, 1.0)] + [(1 + y1, first[y1].exp().detach()) for y1 in range(V)]:
        p, q = torch.log_softmax(theta[row], -1), torch.log_softmax(ref[row], -1)
        a, b = (q, p) if reverse else (p, q)
        total = total + weight * (a.exp() * (a - b)).sum()
    return total


def test_k1_in_the_reward_is_unbiased_for_the_sequence_kl():
    for seed in range(3):
        theta, ref = setup(seed)
        truth = grad(sequence_kl(theta, ref), theta)
        # REINFORCE with reward r(y) = −Σ_t k1_t: ℓ(y) = −sg(r)·log π(y).
        got = expected_gradient(theta, ref, lambda lp, lr: kl_k1(lp, lr).sum().detach() * lp.sum())
        torch.testing.assert_close(got, truth, rtol=1e-12, atol=1e-12)


def test_k3_in_the_loss_follows_the_reverse_kl():
    for seed in range(3):
        theta, ref = setup(seed)
        truth = grad(sequence_kl(theta, ref), theta)
        got = expected_gradient(theta, ref, lambda lp, lr: kl_k3(lp, lr).sum())
        torch.testing.assert_close(got, grad(local_kl(theta, ref, reverse=True), theta))
        assert (got - truth).norm() > 0.05 * truth.norm()  # biased for the KL it reports


def test_k2_k3_plus_and_ratio_corrected_k3_follow_the_local_forward_kl():
    for seed in range(3):
        theta, ref = setup(seed)
        local = grad(local_kl(theta, ref, reverse=False), theta)

        def ratio_k3(lp, lr):  # on-policy: π_old = sg(π), so ρ = 1 with ∇ρ = ∇log π
            return importance_corrected(kl_k3(lp, lr), (lp - lp.detach()).exp()).sum()

        for name, form in [
            ("k2", lambda lp, lr: kl_k2(lp, lr).sum()),
            ("k3+", lambda lp, lr: kl_k3_k2_grad(lp, lr).sum()),
            ("rho*k3", ratio_k3),
        ]:
            got = expected_gradient(theta, ref, form)
            torch.testing.assert_close(got, local, msg=name)
        # The local KL leaves out y1's effect on the second token's KL: not the sequence's.
        truth = grad(sequence_kl(theta, ref), theta)
        assert (local[0] - truth[0]).norm() > 1e-3 and torch.allclose(local[1:], truth[1:])


def test_k1_in_the_loss_has_zero_expected_gradient():
    theta, ref = setup(0)
    got = expected_gradient(theta, ref, lambda lp, lr: kl_k1(lp, lr).sum())
    torch.testing.assert_close(got, torch.zeros_like(got), rtol=0, atol=1e-12)


def test_k3_plus_keeps_k3_value():
    theta, ref = setup(1)
    for y in responses():
        lp, lr = token_logprobs(theta, y), token_logprobs(ref, y)
        torch.testing.assert_close(kl_k3_k2_grad(lp, lr), kl_k3(lp, lr))
