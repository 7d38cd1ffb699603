"""How many rows a training micro-batch may hold so that one step stays within a memory
budget (`memory_budget_gib`): the rows whose saved activations fit in what the weights,
gradients and optimizer state leave of it, never more than `micro_batch_size`.

A real model's step is bounded by the activations autograd keeps for the backward: on
SmolLM2-135M (30 layers), 32 rows of ~120 tokens keep about 5 GB, and a tool run of longer
episodes peaked at 16 GB with every row in one micro-batch. The loss is the same however
the rows are split (the normalisers are global, `rlvr.algo.loss`), so fewer rows per
micro-batch changes only float rounding and time, never the update.
"""

from __future__ import annotations

from typing import Any

from rlvr.models.fused_llama import fused_copy_floats

GIB = 1 << 30
FLOAT32 = 4


def saved_floats_per_token(config: Any, keys: int, fused: bool = True) -> int:
    """Floats a Llama-family layer stack keeps for the backward per token, with attention
    over `keys` positions (an upper count of the tensors autograd saves per layer in the
    fused forward, `rlvr.models.fused_llama`, whose SwiGLU recomputes silu(gate) and whose
    RMSNorm recomputes x·r; a model that runs its own forward (`fused` False) keeps
    silu(gate) too, 4·I, and the norms' x·r, 6·H):

        5·H                     the two RMSNorm inputs (the residual stream) and outputs, o_proj's input
      + 2·(n_q + 2·n_kv)·D      the fused q/k/v output, and q/k after the rotary positions
      + n_q·keys                the attention probabilities
      + 3·I                     the gate/up output, and their product (down's input;
                                a float32 full fine-tune's `SwiGLUDown` keeps no product:
                                counted all the same, so that no run's micro-batches,
                                and so none of its numbers, change)

    times the layers, plus 2·H for the final norm. H = hidden size, I = intermediate size,
    D = head dimension, n_q/n_kv = query/key-value heads. The LM head's logits are not
    counted: `rlvr.models.logprobs.head_logprobs` recomputes them in bounded chunks."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
    per_layer = (5 if fused else 6) * hidden + 2 * (heads + 2 * kv_heads) * head_dim
    per_layer += heads * keys + (3 if fused else 4) * intermediate
    return config.num_hidden_layers * per_layer + 2 * hidden


def resident_bytes(parameters: int, trainable: int, reference_copy: bool) -> int:
    """What a step holds besides activations: the float32 weights, the trainable ones'
    gradients and AdamW's two moments (4·P + 12·P_trainable bytes), and a frozen π_ref
    copy when the run keeps one (4·P more)."""
    return FLOAT32 * parameters * (2 if reference_copy else 1) + 3 * FLOAT32 * trainable


def micro_batch_rows(
    config: Any, tokens_per_row: int, activation_bytes: int, cap: int, fused: bool = True
) -> int:
    """The most rows (at least 1, at most `cap`) whose saved activations, each of
    `tokens_per_row` tokens attending to as many keys, fit in `activation_bytes`."""
    per_row = FLOAT32 * tokens_per_row * saved_floats_per_token(config, tokens_per_row, fused)
    return max(1, min(cap, activation_bytes // max(per_row, 1)))


def activation_budget(
    budget_gib: float, model: Any, reference_copy: bool, precision: str = "fp32"
) -> int:
    """Bytes left for activations under `budget_gib` once the resident state is counted,
    with the weight copy a training forward in `precision` holds as long as its
    activations (`fused_copy_floats`: none in float32; under bf16 autocast the projections'
    bf16 cast, 0.21 GB on SmolLM2-135M) (0 when nothing is left: then every micro-batch
    holds one row)."""
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    held = resident_bytes(parameters, trainable, reference_copy)
    held += FLOAT32 * fused_copy_floats(model, precision)
    return max(0, int(budget_gib * GIB) - held)
