"""The two MinPRO recipes off-policy: the same prefix-minimum ratio under two surrogates.

`minpro` feeds r_t = sg(ρ̲_t)·ρ_t into the CISPO weight, bounds [0, 4] (rlvr's reading);
`minpro_clip` feeds it into the PPO hard clip [0.8, 1.28]. Every case sets logπ_old = 0 and
logπ = log ρ, so ∂ρ_t/∂logπ_t = ρ_t and, with ρ̲_t under stop-gradient, ∂r_t/∂logπ_t = r_t:
  CISPO: ∂ℓ_t/∂logπ_t = −clip(r_t, 0, 4)·Â   (every token keeps a gradient)
  clip:  ∂ℓ_t/∂logπ_t = −r_t·Â, or 0 where the clipped branch is active (Â > 0 and
         r_t > 1.28, or Â < 0 and r_t < 0.8).
The losses are summed, so each token's gradient also proves that no other token's loss
reaches it through the minimum.
"""

import pytest
import torch
from algo_testlib import F64, loss_and_grad, prepare, random_batch

from rlvr.algo import get_recipe
from rlvr.algo.registry import RATIOS, SURROGATES

close = torch.testing.assert_close


def grad_of(name, ratios, advantage, ratio="prefix_min"):
    """∂(Σ_t ℓ_t)/∂logπ for one response under the recipe's surrogate and bounds."""
    recipe = get_recipe(name)
    logprobs = torch.log(torch.tensor([ratios], dtype=F64)).requires_grad_(True)
    old, mask = torch.zeros_like(logprobs), torch.ones_like(logprobs)
    adv = torch.full_like(logprobs, advantage)
    r = RATIOS[ratio](logprobs, old, mask)
    out = SURROGATES[recipe.surrogate](r, adv, logprobs, recipe.params)
    out.loss.sum().backward()
    return logprobs.grad[0], out


def test_recipes_hold_the_two_forms():
    cispo, clip = get_recipe("minpro"), get_recipe("minpro_clip")
    assert (cispo.ratio, cispo.surrogate, cispo.clip_low, cispo.clip_high) == (
        "prefix_min",
        "cispo",
        1.0,
        3.0,
    )
    assert (clip.ratio, clip.surrogate, clip.clip_low, clip.clip_high) == (
        "prefix_min",
        "clip",
        0.2,
        0.28,
    )
    assert cispo.aggregation == clip.aggregation == "token_mean"


def test_ratio_above_the_band_positive_advantage():
    # ρ = (2, 0.5, 1): ρ̲ = (1, 2, min(2, 0.5) = 0.5) → r = (2, 1, 0.5); Â = +1.
    #   minpro:      −clip(r, 0, 4) = (−2, −1, −0.5)
    #   minpro_clip: t=1 r = 2 > 1.28 with Â > 0 → clipped → 0; t=2 −1;
    #                t=3 r = 0.5 < 0.8 but Â > 0: −min(0.5, 0.8) keeps −rÂ → −0.5.
    grad, out = grad_of("minpro", [2.0, 0.5, 1.0], 1.0)
    close(grad, torch.tensor([-2.0, -1.0, -0.5], dtype=F64))
    assert not out.clipped_high.any() and not out.clipped_low.any()
    grad, out = grad_of("minpro_clip", [2.0, 0.5, 1.0], 1.0)
    close(grad, torch.tensor([0.0, -1.0, -0.5], dtype=F64))
    assert out.clipped_high[0].tolist() == [True, False, False]
    assert not out.clipped_low.any()


def test_ratio_below_the_band_negative_advantage():
    # Same ρ, Â = −1: r = (2, 1, 0.5).
    #   minpro:      +clip(r, 0, 4) = (+2, +1, +0.5)
    #   minpro_clip: t=1 r = 2 > 1.28 with Â < 0: −rÂ = 2 > 1.28 → unclipped → +2 (no
    #                dual clip); t=2 +1; t=3 r = 0.5 < 0.8 with Â < 0 → clipped → 0.
    # t=3's own ρ is 1: only the prefix minimum 0.5 puts it below the band.
    grad, _ = grad_of("minpro", [2.0, 0.5, 1.0], -1.0)
    close(grad, torch.tensor([2.0, 1.0, 0.5], dtype=F64))
    grad, out = grad_of("minpro_clip", [2.0, 0.5, 1.0], -1.0)
    close(grad, torch.tensor([2.0, 1.0, 0.0], dtype=F64))
    assert out.clipped_low[0].tolist() == [False, False, True]


def test_small_early_ratio_suppresses_later_tokens():
    # ρ = (1/8, 1, 1, 2): ρ̲ = (1, 1/8, 1/8, 1/8) → r = (1/8, 1/8, 1/8, 1/4).
    # Â = +1: both forms −r = (−1/8, −1/8, −1/8, −1/4) (clip: r < 0.8 with Â > 0 is
    #   unclipped), against (−1/8, −1, −1, −2) for CISPO on the token ratio alone: the
    #   tokens after the small ratio get 1/8 of their weight.
    suppressed = torch.tensor([-1 / 8, -1 / 8, -1 / 8, -1 / 4], dtype=F64)
    ratios = [1 / 8, 1.0, 1.0, 2.0]
    close(grad_of("minpro", ratios, 1.0)[0], suppressed)
    close(grad_of("minpro_clip", ratios, 1.0)[0], suppressed)
    close(
        grad_of("minpro", ratios, 1.0, ratio="token")[0],
        torch.tensor([-1 / 8, -1.0, -1.0, -2.0], dtype=F64),
    )
    # Â = −1: minpro +r = (1/8, 1/8, 1/8, 1/4); minpro_clip: every r < 0.8 with Â < 0 →
    #   clipped → no gradient on the whole response.
    close(grad_of("minpro", ratios, -1.0)[0], -suppressed)
    close(grad_of("minpro_clip", ratios, -1.0)[0], torch.zeros(4, dtype=F64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_policy_the_two_forms_give_the_same_gradient(seed):
    # old = logπ → ρ = ρ̲ = r = 1 inside both bands: both give −Â·w_t, the token-ratio
    # CISPO gradient under the same token_mean weights (the loss values differ).
    batch = random_batch(seed, [3, 2, 4], [3, 7, 1, 5, 2, 6, 4, 7, 2], off_policy=0.0)
    grads = {}
    for name in ("minpro", "minpro_clip", "cispo"):
        recipe = get_recipe(name)
        grads[name] = loss_and_grad(recipe, batch, prepare(recipe, batch))[1]
    assert grads["minpro"].abs().sum() > 0
    close(grads["minpro_clip"], grads["minpro"], rtol=1e-12, atol=1e-15)
    close(grads["cispo"], grads["minpro"], rtol=1e-12, atol=1e-15)


def test_off_policy_the_two_forms_differ():
    # The equivalence above must not hold by accident: off-policy they part.
    batch = random_batch(3, [3, 2, 4], [3, 7, 1, 5, 2, 6, 4, 7, 2], off_policy=0.5)
    grads = []
    for name in ("minpro", "minpro_clip"):
        recipe = get_recipe(name)
        grads.append(loss_and_grad(recipe, batch, prepare(recipe, batch))[1])
    assert not torch.allclose(grads[0], grads[1])
