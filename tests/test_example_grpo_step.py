"""examples/grpo_step.py runs, and its one GRPO step is the loop's first step: same batch,
same loss, same gradient, same updated weights."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from rounding_testlib import (
    A_MAX,
    StepBounds,
    assert_first_adamw_step_equal,
    forward_terms,
    logprob_atol,
    reorder_atol,
)

from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_step.py"


def load_example():
    spec = importlib.util.spec_from_file_location("grpo_step_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_step_equals_the_loop_first_step(capsys):
    example = load_example()
    trainer, result = example.main()
    printed = dict(item.split("=") for item in capsys.readouterr().out.split())
    assert {k: float(v) for k, v in printed.items()} == {
        k: float(f"{v:.9g}") for k, v in result.items()
    }
    loop = Trainer(resolve_config(example.CONFIG))
    metrics = loop.train_step()
    assert metrics["train/update_skipped"] == 0.0
    # On-policy GRPO: ρ = 1 and Σ_i Â_i = 0 per group, so the loss is ~0 by construction;
    # the gradient norm and the updated weights tell the batches and steps apart. The two
    # compute the same step with other batch shapes and orders: rounding only, within the
    # bounds of a step of 16 responses of ≤ 14 tokens (rounding_testlib.StepBounds): the
    # loss sums ≤ 224 terms of Σ w·|Â| ≤ A_MAX; the KL is k3 of two forwards of the same
    # weights, each ≤ τ², on both sides.
    config = loop.model.config
    bounds = StepBounds(logprob_atol(config), 16 * 14 + forward_terms(config), 14)
    assert abs(result["loss/policy"] - metrics["loss/policy"]) <= reorder_atol(16 * 14, A_MAX)
    assert abs(result["loss/kl"] - metrics["loss/kl"]) <= bounds.tau**2
    assert result["grad_norm"] > 0
    norm_bound = bounds.atol("train/grad_norm", metrics["train/grad_norm"])
    assert abs(result["grad_norm"] - metrics["train/grad_norm"]) <= norm_bound
    weights = [p.detach() for p in trainer.model.parameters()]
    assert_first_adamw_step_equal(weights, loop.model, loop.cfg.lr, bounds.grad_terms)
    fresh = Trainer(loop.cfg).model.parameters()
    assert any(
        not torch.equal(a, b) for a, b in zip(trainer.model.parameters(), fresh, strict=True)
    )  # the step moved the weights
