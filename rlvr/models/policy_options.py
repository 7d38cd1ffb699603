"""How a Hugging Face policy is prepared for training: the `policy:` block of a config.

Plain data with validation and no torch import, so configs are checked before anything
heavy loads. Applied by `rlvr.models.hf_policy.prepare_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rlvr.checks import check_int

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class LoraOptions:
    """Low-rank adapters via peft (Hu et al., arXiv:2106.09685): W + (α/r)·B·A."""

    rank: int = 16
    """r, the adapter rank."""
    alpha: float = 32.0
    """α; the update is scaled by α / r."""
    dropout: float = 0.0
    """Must be 0 (accepted for peft-style configs): every RL forward runs with dropout off,
    so that the trainer's log-probs equal the sampler's (`rlvr.models.modes.dropout_off`)."""
    target_modules: Any = "all-linear"
    """Module names to adapt (a list, e.g. [q_proj, v_proj]) or 'all-linear'."""

    def __post_init__(self) -> None:
        check_int("policy.lora.rank", self.rank)
        if not isinstance(self.alpha, int | float) or self.alpha <= 0:
            raise ValueError(f"policy.lora.alpha must be a number > 0, got {self.alpha!r}")
        if not isinstance(self.dropout, int | float) or not 0 <= self.dropout < 1:
            raise ValueError(f"policy.lora.dropout must be in [0, 1), got {self.dropout!r}")
        if self.dropout != 0:
            raise ValueError(
                f"policy.lora.dropout={self.dropout!r} would never take effect: every RL "
                f"forward runs with dropout off, so that the trainer's log-probs equal the "
                f"sampler's and the on-policy ratio is exactly 1; set it to 0 or leave it out"
            )
        targets = self.target_modules
        if not (isinstance(targets, str) or (isinstance(targets, list) and targets)):
            raise ValueError(
                f"policy.lora.target_modules must be 'all-linear' or a list of module names, "
                f"got {targets!r}"
            )
        if isinstance(targets, list) and "lm_head" in targets:
            raise ValueError(
                "policy.lora.target_modules must not include lm_head: the trainer's FP32 head "
                "reads the head's weight directly, so an adapter there would be ignored"
            )


@dataclass(frozen=True)
class PolicyOptions:
    """Options of a Hugging Face policy (ignored by the embedded model)."""

    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16 (the LM head's matmul runs in float32
    whenever the recipe's fp32_head is on)."""
    device: str = "cpu"
    """Torch device of the policy, e.g. cpu, cuda, cuda:1."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30 % more time)."""
    chat_template: bool = False
    """Render every prompt as a user message with the tokenizer's chat template."""
    system_prompt: str | None = None
    """A system message put before the user message (with chat_template)."""
    enable_thinking: bool | None = None
    """Passed to chat templates that read it (Qwen3); null leaves the template default."""
    lora: LoraOptions | None = None
    """Train low-rank adapters instead of every weight; π_ref is the policy with its
    adapters disabled (no second copy of the model)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PolicyOptions:
        data = dict(data or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(f"unknown policy option(s) {unknown}; valid: {', '.join(valid)}")
        lora = data.pop("lora", None)
        if lora is not None:
            if lora is True:
                lora = {}
            if not isinstance(lora, dict):
                raise ValueError(f"policy.lora must be a mapping or true, got {lora!r}")
            lora_valid = [f.name for f in fields(LoraOptions)]
            bad = sorted(set(lora) - set(lora_valid))
            if bad:
                raise ValueError(
                    f"unknown policy.lora option(s) {bad}; valid: {', '.join(lora_valid)}"
                )
            lora = LoraOptions(**lora)
        return cls(**data, lora=lora)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"policy.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(
                f"policy.device must be a device name like 'cpu' or 'cuda', got {self.device!r}"
            )
        for name in ("gradient_checkpointing", "chat_template"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"policy.{name} must be true or false, got {getattr(self, name)!r}"
                )
        if self.enable_thinking is not None and not isinstance(self.enable_thinking, bool):
            raise ValueError(
                f"policy.enable_thinking must be true, false or null, got {self.enable_thinking!r}"
            )
