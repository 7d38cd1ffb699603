"""The rollout interface: what the training loop asks of any generation engine.

An engine turns prompts into `group_size` sampled responses each, and reports the
sampling distribution's log-probabilities so the trainer can measure how far its own
forward pass has drifted from the sampler (truncated importance sampling, off-policy
correction). The HF engine implements it here; a vLLM engine and remote Ray actors
implement the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from rlvr.checks import check_int


@dataclass(frozen=True)
class SamplingParams:
    """How responses are sampled."""

    group_size: int = 8
    """Responses per prompt; a group's responses are contiguous in the batch."""
    temperature: float = 1.0
    """Logits are divided by this before the softmax; must be > 0."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = 16
    """A response that has not emitted EOS after this many tokens is truncated."""
    top_k: int = -1
    """Keep only the k most probable tokens before top_p (Fan et al., arXiv:1805.04833);
    -1: no limit. The HF engine applies it; the vLLM engine refuses anything but -1."""

    def __post_init__(self) -> None:
        check_int("group_size", self.group_size)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        check_int("max_new_tokens", self.max_new_tokens)
        if self.top_k != -1:
            check_int("top_k", self.top_k)


@dataclass
class Generation:
    """A batch of sampled responses, B = len(prompts) × group_size rows."""

    prompt_ids: list[list[int]]
    """(B) the prompt's token ids, one list per response."""
    response_ids: torch.Tensor
    """(B, T) long, right-padded with the pad id; T = the longest response in the batch."""
    response_mask: torch.Tensor
    """(B, T) float32: 1 for every generated token, the EOS token included."""
    sampler_logprobs: torch.Tensor
    """(B, T) float32: log-prob of the distribution sampled from: softmax(logits /
    temperature), restricted to the top-p nucleus and renormalised when top_p < 1; 0 where
    the mask is 0."""
    truncated: torch.Tensor
    """(B,) bool: hit max_new_tokens without emitting EOS."""
    prompt_index: torch.Tensor
    """(B,) long: index into the prompts list."""
    texts: list[str]
    """Decoded responses, without EOS or padding."""
    forced_mask: torch.Tensor | None = None
    """(B, T) float32 or None: 1 on tokens the engine inserted instead of sampling (forced
    length interruption). They are context for later tokens, never trained on."""
    episodes: list | None = None
    """Multi-turn episodes (`rlvr.rollout.episodes`): one `EpisodeRecord` per row, whose
    `forced_mask` then also marks the environment's observation tokens. None: one turn."""

    def __post_init__(self) -> None:
        batch, steps = self.response_ids.shape
        for name in ("response_mask", "sampler_logprobs"):
            if tuple(getattr(self, name).shape) != (batch, steps):
                raise ValueError(
                    f"{name} has shape {tuple(getattr(self, name).shape)}, "
                    f"expected {(batch, steps)}"
                )
        sizes = {len(self.prompt_ids), len(self.texts), len(self.truncated), len(self.prompt_index)}
        if sizes != {batch}:
            raise ValueError(f"per-row fields disagree with the batch size {batch}: {sizes}")

    @property
    def response_lengths(self) -> torch.Tensor:
        """(B,) long: generated tokens per response, EOS included."""
        return self.response_mask.sum(-1).long()


class RolloutEngine(Protocol):
    """Anything that samples `params.group_size` responses for each prompt."""

    def generate(
        self, prompts: list[str], params: SamplingParams, generator: torch.Generator
    ) -> Generation: ...

    def generate_ids(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator
    ) -> Generation: ...

    def sync_weights(self) -> None:
        """Make the engine sample from the trainer's current weights (called after every
        policy update; a no-op for an engine that shares the trainer's module)."""
        ...

    def score_ids(self, prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        """log π(y_t | x, y_<t) (one float32 tensor per response) of given responses under
        the weights the engine samples with, at temperature 1 and top_p 1: what the
        weight-sync probe compares with the trainer's (rlvr/train/sampler/sync_probe.py)."""
        ...


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt; an empty list, or a prompt that encodes to nothing, is
    refused by its index and text."""
    if not prompts:
        raise ValueError("generate needs at least one prompt")
    encoded = [tokenizer.encode(p) for p in prompts]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} ({prompts[i]!r}) encodes to no tokens")
    return encoded


class TextPrompts:
    """`generate` from text prompts, for an engine with a `tokenizer` and `generate_ids`."""

    def generate(
        self, prompts: list[str], params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        """Sample `params.group_size` responses per prompt; deterministic given `generator`."""
        return self.generate_ids(encode_prompts(self.tokenizer, prompts), params, generator)
