"""The module mode of RL forwards: dropout off, gradients on."""

from __future__ import annotations

import torch


def dropout_off(model: torch.nn.Module) -> torch.nn.Module:
    """Turn every dropout off for RL forwards; returns `model`.

    `eval()` does it for a causal LM and changes nothing else. Hugging Face gradient
    checkpointing, though, only runs in train mode, so a checkpointed model stays in train
    mode with every dropout probability set to 0: `nn.Dropout` modules (LoRA's included)
    and the float `attention_dropout` / `dropout` that HF attention modules read.
    """
    if not checkpointing(model):
        return model.eval()
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    return model


def checkpointing(model: torch.nn.Module) -> bool:
    """Whether HF gradient (activation) checkpointing is on, under either transformers name."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False
