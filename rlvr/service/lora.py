"""The LoRA shape a training client is made with, as the remote APIs take it: rank, seed,
and which layers get adapters (`train_attn`, `train_mlp`, `train_unembed`).

The adapters' random initialisation follows `seed` (security audit F18: two clients made
with one seed start from the same adapters, in any process). `train_unembed` cannot take
effect: rlvr computes log-probs with its own float32 LM head from the base weight
(`rlvr.models.logprobs.lm_head_logits`), which an adapter on the output layer would
bypass, so the unembedding stays frozen, with a warning, rather than train an adapter
that no log-prob sees.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rlvr.models.policy_options import LoraOptions

ATTENTION = ("attn", "attention")
MLP = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class LoraShape:
    """What rebuilds a LoRA client: W + (α/r)·B·A on the chosen layers, A drawn from `seed`."""

    rank: int = 16
    alpha: float = 32.0
    seed: int = 0
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True

    def __post_init__(self) -> None:
        if not (self.train_attn or self.train_mlp):
            raise ValueError(
                "train_attn=False and train_mlp=False leave no layer to adapt (the "
                "unembedding cannot be trained locally: rlvr/service/lora.py)"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"LoRA seed={self.seed!r} must be an integer")

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, value: Any) -> LoraShape:
        """From `record()`, or the (rank, alpha) pair an older rlvr.service saved."""
        if isinstance(value, list | tuple):
            return cls(rank=int(value[0]), alpha=float(value[1]))
        return cls(**value)

    def options(self, model: torch.nn.Module) -> LoraOptions:
        """rlvr's LoRA options for `model`: every linear layer ('all-linear') when both
        attention and MLP train, else the linear layers of the one that does."""
        if self.train_unembed:
            _warn_unembed()
        if self.train_attn and self.train_mlp:
            return LoraOptions(rank=self.rank, alpha=self.alpha)
        words = ATTENTION if self.train_attn else MLP
        targets = sorted(
            {
                name.rsplit(".", 1)[-1]
                for name, module in model.named_modules()
                if isinstance(module, torch.nn.Linear) and _under(name, words)
            }
        )
        if not targets:
            kind = "attention" if self.train_attn else "MLP"
            raise ValueError(f"the model has no linear {kind} layer to adapt (by module name)")
        return LoraOptions(rank=self.rank, alpha=self.alpha, target_modules=targets)


def _under(name: str, words: tuple[str, ...]) -> bool:
    parents = name.split(".")[:-1]
    return any(word in part for part in parents for word in words)


_warned = False


def _warn_unembed() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "train_unembed=True cannot take effect locally: rlvr's float32 LM head reads the "
            "base weight, so the unembedding stays frozen (pass train_unembed=False to "
            "silence this)",
            stacklevel=4,
        )
