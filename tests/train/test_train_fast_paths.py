"""Speed paths that must not change the math: reusing the training forward as π_old when
on-policy, and length-sorted micro-batches in the no-gradient forwards."""

from __future__ import annotations

import dataclasses
import math

import torch
from rounding_testlib import A_MAX, LOGIT_SCALE, assert_within, logprob_atol

from rlvr.train import Trainer
from rlvr.train.collect import collect_rollouts
from rlvr.train.update import policy_update


class RecordingOptimizer:
    """Stands in for AdamW: records the accumulated gradient instead of stepping."""

    def __init__(self, model):
        self.params = list(model.parameters())
        self.grads = []

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads.append([p.grad.clone() for p in self.params])


def test_on_policy_reuse_of_the_training_forward_equals_a_separate_pi_old_forward(
    small_config,
):
    """On-policy (one minibatch, one epoch) the loop passes no π_old and the update uses
    its own forward, detached; a separate no-grad π_old forward gives the same loss,
    clip statistics and gradient (the ratio is exactly 1 either way)."""
    for recipe in ("grpo", "dapo", "cispo"):
        trainer = Trainer(small_config(recipe=recipe, steps=1, dynamic_sampling=False))
        assert trainer.on_policy
        rollout = collect_rollouts(
            trainer.engine,
            trainer.task,
            trainer.pool,
            trainer.recipe,
            trainer.params,
            trainer.cfg.prompts_per_step,
            trainer.generator,
        ).rollout
        prepared = trainer._prepare(rollout)
        assert rollout.old_logprobs is None and prepared.keep.any()
        runs = []
        for old in (None, trainer._logprobs(trainer.model, rollout)):
            rollout.old_logprobs = old
            optimizer = RecordingOptimizer(trainer.model)
            metrics = policy_update(
                trainer.model, optimizer, trainer.recipe, rollout, prepared, trainer.settings
            )
            runs.append((metrics, optimizer.grads[0]))
        (reused, grads_reused), (separate, grads_separate) = runs
        # The separate forward has other batch shapes: log π_old = log π ± τ (rounding,
        # rounding_testlib.logprob_atol), so ρ = e^(±τ) where reuse gives exactly 1. Each
        # loss term w·Â·ρ (CISPO: w·Â·sg(ρ)·log π, |log π| ≤ 2·LOGIT_SCALE) and each
        # gradient term moves by a relative e^τ − 1, summed in the same order on both sides:
        # |Δloss| ≤ (e^τ − 1)·A_MAX·2·LOGIT_SCALE (Σw ≤ 1), |Δg| ≤ (e^τ − 1)·M, M the
        # tensor's largest |g| (its terms taken of the gradient's own size). A π_old of
        # another policy would move ρ past the clip range instead.
        rel = math.expm1(logprob_atol(trainer.model.config))
        for key in [k for k in reused if k.startswith("loss/")]:
            assert abs(reused[key] - separate[key]) <= rel * A_MAX * 2 * LOGIT_SCALE, key
        assert any(g.abs().sum() > 0 for g in grads_reused)
        for i, (a, b) in enumerate(zip(grads_reused, grads_separate, strict=True)):
            assert_within(a, b, rel * b.abs().max().item(), f"{recipe} grad {i}:")


def test_length_sorted_forward_rows_come_back_in_row_order(small_config):
    trainer = Trainer(small_config(recipe="grpo", steps=1))
    rollout = collect_rollouts(
        trainer.engine,
        trainer.task,
        trainer.pool,
        trainer.recipe,
        trainer.params,
        trainer.cfg.prompts_per_step,
        trainer.generator,
    ).rollout
    lengths = rollout.response_mask.sum(-1)
    assert lengths.min() < lengths.max()  # the case under test: rows of mixed lengths
    whole = trainer._logprobs(trainer.model, rollout)
    trainer.cfg = dataclasses.replace(trainer.cfg, micro_batch_size=3)
    sorted_micro = trainer._logprobs(trainer.model, rollout)
    # Other batch shapes, so other summation orders: within τ (rounding_testlib.py); rows
    # put back in the wrong order would be off by whole log-probs.
    tau = logprob_atol(trainer.model.config)
    torch.testing.assert_close(sorted_micro, whole, atol=tau, rtol=0)
    order = rollout.by_length(torch.arange(len(rollout)))
    packed = torch.tensor([len(rollout.prompt_ids[i]) for i in order]) + lengths[order]
    assert (packed[1:] >= packed[:-1]).all()
