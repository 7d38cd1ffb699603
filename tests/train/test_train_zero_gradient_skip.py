"""A step whose every advantage is exactly 0, with no other term in its loss, computes no
forward/backward (`train/backward_skipped`), and leaves the gradient and the weights
exactly as the computed step would; a step with a KL term in the loss still computes.
And the forwards a recipe does not need are not run: no π_ref without a KL, no π_old
on-policy."""

from __future__ import annotations

import pytest
import torch

from rlvr.algo.recipes import get_recipe
from rlvr.train import Trainer
from rlvr.train import update as update_module


class _AllCorrectAfterFirstStep:
    """The real task for the first step, then every answer correct: zero advantages."""

    def __init__(self, task):
        self.task, self.calls = task, 0

    def problems(self, split):
        return self.task.problems(split)

    def verify(self, problem, completion):
        from rlvr.verify import Verdict

        if self.calls >= 1:
            return Verdict(True, True, completion)
        return self.task.verify(problem, completion)


class RecordingAdamW(torch.optim.AdamW):
    """AdamW that keeps a copy of every gradient it applies."""

    def __init__(self, params, **kw):
        params = list(params)
        super().__init__(params, **kw)
        self.recorded, self.watched = [], params

    def step(self, closure=None):
        grads = [None if p.grad is None else p.grad.clone() for p in self.watched]
        self.recorded.append(grads)
        return super().step(closure)


def _second_step(small_config, recipe: str, compute_anyway: bool, monkeypatch, **overrides):
    """Two steps, the second with every answer correct (Â = 0 in every group); returns
    (the second step's metrics, its gradient, the weights after it)."""
    with monkeypatch.context() as patch:
        if compute_anyway:  # the same step with the skip switched off
            patch.setattr(
                update_module,
                "skippable_rows",
                lambda recipe, adv, keep=None: torch.zeros(adv.shape[0], dtype=torch.bool),
            )
        trainer = Trainer(small_config(recipe=recipe, lr=1e-3, **overrides))
        trainer.optimizer = RecordingAdamW(trainer.model.parameters(), lr=1e-3)
        trainer.task = _AllCorrectAfterFirstStep(trainer.task)
        first = trainer.train_step()
        assert first["train/backward_skipped"] == 0.0  # the first step learns
        trainer.task.calls = 1
        metrics = trainer.train_step()
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    return metrics, trainer.optimizer.recorded[-1], weights


@pytest.mark.parametrize("recipe", ["dr_grpo", "cispo"])
def test_an_all_zero_advantage_step_skips_its_backward_with_identical_weights(
    small_config, monkeypatch, recipe
):
    skipped, grads, weights = _second_step(small_config, recipe, False, monkeypatch)
    computed, ref_grads, ref_weights = _second_step(small_config, recipe, True, monkeypatch)
    assert skipped["reward/zero_adv_frac"] == 1.0  # the premise: every group uniform
    assert skipped["train/backward_skipped"] == 1.0
    assert skipped["train/skipped_rows"] == 16.0  # SMALL: 4 prompts × 4 samples
    assert computed["train/backward_skipped"] == 0.0 and computed["train/skipped_rows"] == 0.0
    # Exact equality: with Â = 0 every product in the backward is 0·x = ±0, so the computed
    # gradient is exactly 0, as the skip's zeros; AdamW then takes identical steps.
    assert all(torch.equal(g, torch.zeros_like(g)) for g in ref_grads if g is not None)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads if g is not None)
    assert [g is None for g in grads] == [g is None for g in ref_grads]
    assert all(torch.equal(a, b) for a, b in zip(weights, ref_weights, strict=True))


def test_a_kl_in_the_loss_keeps_the_backward(small_config, monkeypatch):
    """GRPO's β·KL has a gradient whatever Â is: the zero-advantage step still computes."""
    metrics, _, _ = _second_step(small_config, "grpo", False, monkeypatch)
    assert metrics["reward/zero_adv_frac"] == 1.0
    assert metrics["train/backward_skipped"] == 0.0 and metrics["train/skipped_rows"] == 0.0


@pytest.mark.parametrize(
    ("recipe", "changes", "expected"),
    [
        ("dr_grpo", {}, True),
        ("grpo", {}, False),  # β·KL in the loss
        ("grpo", {"kl_coef": 0.0}, True),
        ("dr_grpo", {"entropy_coef": 0.01}, False),
        ("dr_grpo", {"nll_coef": 0.1}, False),
        ("ppo", {}, True),  # its KL is in the reward; the critic has its own update
        ("kl_cov", {}, False),  # KL-Cov's penalty does not vanish with Â
    ],
)
def test_which_recipes_get_their_gradient_only_from_advantages(recipe, changes, expected):
    from dataclasses import replace

    chosen = replace(get_recipe(recipe), **changes)
    assert update_module.gradient_only_from_advantages(chosen) is expected
    zero = torch.zeros(3, 5)
    assert bool(update_module.skippable_rows(chosen, zero).all()) is expected
    mixed = zero.clone()
    mixed[1, 2] = 0.5  # one row learns: without zero_adv_skip nothing is skipped
    assert not update_module.skippable_rows(chosen, mixed).any()


def test_no_reference_forward_without_kl_and_no_old_forward_on_policy(small_config):
    """On-policy (one optimizer step per batch) π_old is the differentiated policy itself and
    β = 0 builds no π_ref: a step runs no log-prob forward besides the update's own. With
    β > 0 exactly one (π_ref); with two minibatches π_old is needed and computed."""
    counts = {}
    for name, overrides in {
        "beta0": {"recipe": "grpo", "kl_coef": 0.0},
        "beta": {"recipe": "grpo"},
        "two_minibatches": {"recipe": "grpo", "kl_coef": 0.0, "num_minibatches": 2},
    }.items():
        trainer = Trainer(small_config(**overrides))
        calls: list = []
        original = trainer._logprobs
        trainer._logprobs = lambda model, rollout, o=original, c=calls: (
            c.append(model) or o(model, rollout)
        )
        trainer.train_step()
        counts[name] = (len(calls), trainer.reference is not None)
    assert counts == {"beta0": (0, False), "beta": (1, True), "two_minibatches": (1, False)}
