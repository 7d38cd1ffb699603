"""examples/grpo_step.py runs, and its one GRPO step is the loop's first step: same batch,
same loss, same gradient, same updated weights."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch

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
    # the gradient norm and the updated weights tell the batches and steps apart.
    assert math.isclose(result["loss/policy"], metrics["loss/policy"], abs_tol=1e-7)
    assert math.isclose(result["loss/kl"], metrics["loss/kl"], abs_tol=1e-9)
    assert result["grad_norm"] > 0
    assert math.isclose(result["grad_norm"], metrics["train/grad_norm"], rel_tol=1e-4)
    for a, b in zip(trainer.model.parameters(), loop.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    fresh = Trainer(loop.cfg).model.parameters()
    assert any(
        not torch.equal(a, b) for a, b in zip(trainer.model.parameters(), fresh, strict=True)
    )  # the step moved the weights
