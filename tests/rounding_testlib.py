"""Float32 rounding bounds for tests that compare two computations of one value that add in
different orders (STYLE.md rule 12): micro-batched against whole, two ranks against one
process, a chunked head against the whole head, a decode step against a full forward.
Which kernels run, and in what order they add, depends on the tensor shapes and on the
CPU (`ATEN_CPU_CAPABILITY`: default, avx2, avx512; MKL's own code path per CPU vendor),
so a tolerance must hold for every order, not for the one this CPU happens to use:

- A float32 sum of n terms is off by at most γₙ·Σ|xᵢ| (γₙ = n·u/(1 − n·u), u = 2⁻²⁴;
  Higham, Accuracy and Stability of Numerical Algorithms, §4.2), so two orders of it
  differ by at most 2γₙ·Σ|xᵢ| ≤ n·ε·M, with ε = 2⁻²³ (`EPS32`) and M ≥ Σ|xᵢ|
  (`reorder_atol`).
- A log-prob goes through a chain of such sums; `forward_terms` counts the chain's terms.
- AdamW's first step moves a weight by lr·g/(|g| + ε_adam), whose slope in g is
  lr·ε_adam/(|g| + ε_adam)²: near g = 0 it turns a 1e-12 gradient difference into a
  1e-6 weight difference (`adamw_first_step_atol`).
"""

from __future__ import annotations

import torch

EPS32 = torch.finfo(torch.float32).eps  # 2⁻²³ ≈ 1.19e-7

LOGIT_SCALE = 16.0
"""M for a logit: an upper bound on Σₖ|hₖ·wₖ| of the head's dot product (hence on |logit|)
for the models the suite builds. Measured on the warm-started embedded model over the
eval prompts: max Σₖ|hₖ·wₖ| = 9.8 (‖h‖ is RMS-normalised, head rows have ‖w‖ ≤ 0.83);
randomly initialised tiny models stay below 2.3 (`RANDOM_LOGIT_SCALE`). 16 leaves room for
the RL steps the tests take (lr ≤ 1e-2, a few steps)."""

RANDOM_LOGIT_SCALE = 4.0
"""M for a randomly initialised tiny model's logit: max Σₖ|hₖ·wₖ| measured 0.43–2.25 over
the suite's tiny configs and seeds 0–2 (the defaults: 2.25), with room to spare."""


def reorder_atol(terms: int, magnitude: float) -> float:
    """The most two float32 orders of a sum of `terms` terms whose |terms| add up to at most
    `magnitude` can differ by: 2γₙ·M ≤ n·ε·M (n·u ≪ 1 here)."""
    return terms * EPS32 * magnitude


def forward_terms(config, positions: int | None = None) -> int:
    """The additions along a log-prob's longest chain of sums through a Qwen2-like
    `config` (an upper count: every stage's rounding error adds to the next one's input):
    per layer, the attention's q/k/v and output projections (hidden each), the softmax and
    the weighted sum over at most `positions` (default max_position_embeddings), the MLP's up and
    down projections (hidden, intermediate); then the head (hidden) and log-softmax's sum
    over the vocabulary. The embedded model (hidden 128, intermediate 512, 4 layers, 128
    positions, 98 tokens): 4·(4·128 + 2·128 + 128 + 512) + 128 + 98 = 5,858."""
    hidden, positions = config.hidden_size, positions or config.max_position_embeddings
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden  # GPT-2: 4·hidden
    per_layer = 4 * hidden + 2 * positions + hidden + intermediate
    return config.num_hidden_layers * per_layer + hidden + config.vocab_size


def logprob_atol(config, scale: float = LOGIT_SCALE, positions: int | None = None) -> float:
    """Two forwards of one model that add in other orders (another batch shape, a KV cache,
    a chunked head) give log-probs at most this far apart: n·ε·M with n = `forward_terms`
    and M = `scale`. The embedded model: 5,858 · 1.19e-7 · 16 = 1.1e-2."""
    return reorder_atol(forward_terms(config, positions), scale)


def bf16_logprob_atol(config, scale: float = RANDOM_LOGIT_SCALE) -> float:
    """Two bf16-autocast forwards that add in other orders: each stage (per layer q/k/v,
    attention, output projection, norm, up and down projections; then the final norm and
    the head) rounds its float32 result to bf16, so the two may end a bf16 ulp apart at
    each of its S = 6·layers + 2 stages: S·2⁻⁷·M (relative ε_bf16 = 2⁻⁷ per stage)."""
    return (6 * config.num_hidden_layers + 2) * 2**-7 * scale


def adamw_first_step_atol(
    grad: torch.Tensor, grad_atol: float, lr: float, eps: float = 1e-8
) -> torch.Tensor:
    """Per element, how far apart AdamW's first step puts a weight when its gradient `grad`
    is known to ±`grad_atol`: the step is lr·g/(|g| + ε) (m̂ = g, √v̂ = |g|; decay multiplies
    both sides' weight alike), with slope lr·ε/(|g| + ε)² largest at the smallest |g| in
    reach, so lr·ε·δ/(max(|g| − δ, 0) + ε)²; never more than 2·lr (the step's sign flips)."""
    nearest = (grad.abs() - grad_atol).clamp(min=0)
    return (lr * eps * grad_atol / (nearest + eps) ** 2).clamp(max=2 * lr)


def assert_within(actual: torch.Tensor, expected: torch.Tensor, atol, what: str = "") -> None:
    """|actual − expected| ≤ atol elementwise (`atol` a float or a tensor of bounds), with
    the worst element's values and bound in the message."""
    atol = torch.as_tensor(atol, dtype=actual.dtype).expand_as(actual)
    excess = (actual - expected).abs() - atol
    if (excess > 0).any():
        i = int(excess.flatten().argmax())
        a, e, t = (x.flatten()[i].item() for x in (actual, expected, atol))
        bad = int((excess > 0).sum())
        raise AssertionError(
            f"{what} {bad} of {actual.numel()} elements beyond their bound; worst at {i}: "
            f"{a!r} vs {e!r}, |Δ| = {abs(a - e):.3g} > {t:.3g}"
        )


A_MAX = 4.0
"""|Â| bound for the suite's small batches: a z-scored group of G values has |Â| ≤ √(G − 1)
(√3 for groups of 4); PPO's whitened GAE advantages on these short responses stay below 4
(measured ≤ 3)."""


class StepBounds:
    """How far a training step's logged metric may lie from another computation of the same
    step (same rollout, same weights before it; other batch shapes, ranks or kernels), when
    a log-prob is known to ±τ (`logprob_atol`) and a gradient element sums `grad_terms`
    terms. Counts, lengths, rewards and the metrics derived from them only (rollout/,
    reward/, train/ counters, env/, eval/) are sums of integers, exact in float32 below
    2²⁴: the ratio that makes a mean, and its merge over ranks, round ≤ 2 times (2·ε·|x|).
    The rest, per metric (`atol`):

    - rollout/mismatch_k1, _max_abs_log_ratio: each side is within τ of 0: 2τ;
      _seq_k1 (a response's sum): 2τ·`response_tokens`; _k3 = e^x − 1 − x ≤ x² for
      |x| ≤ τ: τ²; _frac_outside_band: 0 (τ ≪ log of any band edge the suite uses).
    - policy/entropy: |∂H/∂zᵢ| = pᵢ·|log pᵢ + H| sums to ≤ 2H, so 2·H·τ.
    - loss/policy: Σₜ wₜ·Âₜ·ρₜ, Σw ≤ 1, ρ known to a relative 2τ (two log-probs) and
      ≤ 1.5 where it is not exactly 1: A_MAX·1.5·2τ, plus the sum's reordering.
    - loss/kl (k3 of log π_ref − log π, |x| ≤ 1 in a few small steps, slope ≤ e − 1 < 2),
      loss/entropy and any other loss/: 4τ (two log-probs, slope ≤ 2).
    - clip/ratio_mean, _ratio_abs_dev: ρ ≤ 1.5 to a relative 2τ: 3τ.
    - train/grad_norm: each term of each gradient element rounds to a relative
      `grad_terms`·ε (taking the terms of the element's own size, as for gradients), and
      clipping's 1/‖g‖ once more: 2·`grad_terms`·ε·‖g‖.

    A sampled token differs between two sides only where a uniform draw falls within the
    rounding of a cumulative probability: that is not bounded here (the sides sample with
    the same kernels where they can; not seen in any run)."""

    def __init__(self, tau: float, grad_terms: int, response_tokens: int):
        self.tau, self.grad_terms, self.response_tokens = tau, grad_terms, response_tokens

    def atol(self, key: str, value: float) -> float:
        tau, x = self.tau, abs(value)
        bounds = {
            "rollout/mismatch_k1": 2 * tau,
            "rollout/mismatch_max_abs_log_ratio": 2 * tau,
            "rollout/mismatch_seq_k1": 2 * tau * self.response_tokens,
            "rollout/mismatch_k3": tau**2,
            "rollout/mismatch_frac_outside_band": 0.0,
            "policy/entropy": 2 * x * tau,
            "loss/policy": A_MAX * 1.5 * 2 * tau + reorder_atol(self.grad_terms, A_MAX),
            "clip/ratio_mean": 3 * tau,
            "clip/ratio_abs_dev": 3 * tau,
            "train/grad_norm": 2 * self.grad_terms * EPS32 * x,
        }
        if key in bounds:
            return bounds[key]
        if key.startswith("loss/"):
            return 4 * tau
        return 2 * EPS32 * x

    def assert_metrics(self, got: dict[str, float], expected: dict[str, float]) -> None:
        """Every metric of `expected` but time/ within its bound in `got`."""
        for key, value in expected.items():
            if not key.startswith("time/"):
                bound = self.atol(key, value)
                assert abs(got[key] - value) <= bound, (key, got[key], value, bound)


def assert_first_adamw_step_equal(
    weights, model: torch.nn.Module, lr: float, grad_terms: int, eps: float = 1e-8
) -> None:
    """`weights` (another computation's, e.g. two ranks') equal `model`'s after both took
    one AdamW step (`lr`, `eps`) from the same weights, `model`'s gradient still in
    `.grad`: per element within `adamw_first_step_atol` of a gradient known to twice its
    reordered-sum bound (once for its terms, once for clipping's 1/‖g‖, which rounds to
    the same relative bound), plus the rounding of the step itself, ½ ulp for each of its
    ~6 operations on a value ≤ lr·|m̂/(√v̂ + ε)| ≤ lr on either side (6·ε·lr), and ½ ulp of
    the weight on either side (ε·|w|)."""
    for i, (a, p) in enumerate(zip(weights, model.parameters(), strict=True)):
        b = p.detach()
        if p.grad is None:
            assert torch.equal(a, b), f"weight {i} moved without a gradient"
            continue
        delta = 2 * reorder_atol(grad_terms, p.grad.abs().max().item())
        atol = adamw_first_step_atol(p.grad, delta, lr, eps) + EPS32 * (b.abs() + 6 * lr)
        assert_within(a, b, atol, f"weight {i}:")
