"""The model's context length, and the check that prompt + response fits in it.

A causal LM attends over at most `max_position_embeddings` positions; past it, rotary
embeddings extrapolate and learned position tables run out. A run refuses a budget that
cannot fit before it starts (`check_context`), and the rollout engines cut a response at
the context even when a caller asks for more (`response_limits`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def context_length(model: Any) -> int | None:
    """`config.max_position_embeddings` of `model` (a LoRA-adapted or plain HF model),
    or None when its config names none."""
    value = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def response_limits(
    prompt_lengths: Iterable[int], max_new_tokens: int, context: int | None
) -> list[int]:
    """Tokens each prompt may be answered with: `max_new_tokens`, cut so that prompt +
    response stays within `context` (None: no limit). A prompt that leaves no room is
    refused by its index and length."""
    limits = []
    for i, length in enumerate(prompt_lengths):
        room = max_new_tokens if context is None else min(max_new_tokens, context - length)
        if room < 1:
            raise ValueError(
                f"prompt {i} has {length} tokens, which leaves no room to generate within the "
                f"model's context length of {context} tokens (max_position_embeddings); "
                f"shorten the prompt or use a model with a longer context"
            )
        limits.append(room)
    return limits


def check_context(max_new_tokens: int, context: int | None, longest_prompt: int = 0) -> None:
    """Refuse `max_new_tokens` that cannot fit in the model's context after the longest
    prompt (`longest_prompt` tokens; 0 when unknown). No-op when `context` is None."""
    if context is None:
        return
    if max_new_tokens >= context:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} does not fit in the model's context length of "
            f"{context} tokens (max_position_embeddings), which must also hold the prompt; "
            f"use max_new_tokens < {context}"
        )
    room = context - longest_prompt
    if room < 1:
        raise ValueError(
            f"the longest prompt ({longest_prompt} tokens) fills the model's context length "
            f"of {context} tokens (max_position_embeddings): no room for max_new_tokens="
            f"{max_new_tokens}; shorten the prompts or use a model with a longer context"
        )
    if max_new_tokens > room:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} plus the longest prompt ({longest_prompt} "
            f"tokens) exceeds the model's context length of {context} tokens "
            f"(max_position_embeddings); use max_new_tokens ≤ {room} "
            f"or shorter prompts"
        )
