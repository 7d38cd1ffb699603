"""The memory budget: hand-counted saved activations, the rows it lets a micro-batch hold,
and a budget that forces small micro-batches leaving the gradient as it was."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rounding_testlib import assert_within, forward_terms, reorder_atol
from test_train_loop import RecordingOptimizer

from rlvr.models.fused_llama import fused_copy_floats
from rlvr.train import Trainer
from rlvr.train.memory_budget import (
    GIB,
    micro_batch_rows,
    resident_bytes,
    saved_floats_per_token,
)

# H 8, 2 query heads and 1 key-value head of D 4, I 16, 2 layers.
SMALL = SimpleNamespace(
    hidden_size=8,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    intermediate_size=16,
    num_hidden_layers=2,
)


def test_saved_floats_per_token_by_hand():
    # Per layer, attending to 5 keys: 5·8 = 40; 2·(2 + 2·1)·4 = 32; 2·5 = 10; 3·16 = 48;
    # 130 per layer, 260 for both, plus 2·8 for the final norm: 276.
    assert saved_floats_per_token(SMALL, keys=5) == 276
    # A model on its own forward also keeps silu(gate) and the norms' x·r: 6·8 = 48 and
    # 4·16 = 64, 154 per layer, 324.
    assert saved_floats_per_token(SMALL, keys=5, fused=False) == 324


def test_resident_bytes_by_hand():
    # 100 float32 weights (400 B), 10 trainable: gradient and two AdamW moments (120 B);
    # a frozen π_ref copy doubles the weights (800 B).
    assert resident_bytes(100, 10, reference_copy=False) == 520
    assert resident_bytes(100, 10, reference_copy=True) == 920


@pytest.mark.parametrize(
    ("budget", "cap", "rows"),
    [(3 * 5520, 64, 3), (3 * 5520 - 1, 64, 2), (0, 64, 1), (10 * 5520, 4, 4)],
)
def test_rows_that_fit(budget, cap, rows):
    # A row of 5 tokens keeps 5·276 floats, 4 bytes each: 5,520 B.
    assert micro_batch_rows(SMALL, 5, budget, cap) == rows


def test_a_budget_that_splits_the_batch_leaves_the_gradient_as_it_was(small_config):
    """Two rows per micro-batch by budget against all 16 in one: the same gradient."""
    grads, rows = [], []
    for budget in (None, "two rows"):
        cfg = small_config(steps=1, max_grad_norm=0.0, dynamic_sampling=False)
        trainer = Trainer(cfg)
        if budget == "two rows":  # the budget that leaves room for 2.5 of this batch's rows
            rollout = trainer._collect().rollout
            tokens = max(map(len, rollout.prompt_ids)) + rollout.response_ids.shape[1]
            config = trainer.model.config
            per_row = 4 * tokens * saved_floats_per_token(config, tokens)
            params = sum(p.numel() for p in trainer.model.parameters())
            copy = isinstance(trainer.reference, torch.nn.Module)  # a frozen π_ref
            resident = resident_bytes(params, params, reference_copy=copy)
            resident += 4 * fused_copy_floats(trainer.model)  # the fused forward's weight copy
            cfg = small_config(
                steps=1,
                max_grad_norm=0.0,
                dynamic_sampling=False,
                memory_budget_gib=(resident + 2.5 * per_row) / GIB,
            )
            trainer = Trainer(cfg)
        trainer.optimizer = RecordingOptimizer(trainer.model)
        metrics = trainer.train_step()
        rows.append(metrics["train/micro_batch_rows"])
        grads.append(trainer.optimizer.grads[0])
    assert rows == [64, 2]  # the default budget (4 GiB) keeps the embedded model's 64
    # As test_train_loop's micro-batch test: n = 16 rows × 14 tokens + forward_terms.
    terms = 16 * 14 + forward_terms(trainer.model.config)
    for i, (a, b) in enumerate(zip(*grads, strict=True)):
        assert_within(a, b, reorder_atol(terms, b.abs().max().item()), f"grad {i}:")


def test_bad_budgets_are_named(small_config):
    for bad in (0, -1.0, "8GB"):
        with pytest.raises(ValueError, match="memory_budget_gib must be"):
            small_config(memory_budget_gib=bad)


def test_the_fused_forwards_weight_copy_is_held_against_the_budget():
    """Hidden 32, 2 query heads and 1 key-value head of 16, I 512, 2 layers. In float32 the
    training forward holds no copy of its weights (the concatenations are made per product,
    `CatLinear`); under bf16 autocast it holds each projection cast to bf16: q 32·32, k and
    v 16·32 each, o 32·32, gate, up and down 512·32 each = 52,224 weights a layer, 104,448
    in both, at 2 bytes: 52,224 floats of 4 bytes off the activations'."""
    from rlvr.models import build_tiny_policy, tiny_qwen2_config
    from rlvr.train.memory_budget import activation_budget

    config = tiny_qwen2_config(vocab_size=20, hidden=32, layers=2, heads=2, kv_heads=1)
    model = build_tiny_policy(config, seed=0)
    params = sum(p.numel() for p in model.parameters())
    resident = resident_bytes(params, params, reference_copy=False)
    assert fused_copy_floats(model) == 0
    assert activation_budget(1.0, model, reference_copy=False) == GIB - resident
    assert fused_copy_floats(model, "bf16") == 52_224
    bf16 = activation_budget(1.0, model, reference_copy=False, precision="bf16")
    assert bf16 == GIB - resident - 4 * 52_224
    model.model.gradient_checkpointing = True  # its own forward: no copy
    assert fused_copy_floats(model, "bf16") == 0
    assert activation_budget(1.0, model, reference_copy=False) == GIB - resident
