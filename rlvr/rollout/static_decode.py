"""A lean decode loop for Llama-family causal LMs (`rlvr.models.fused_llama`): a
preallocated (static) KV cache and a decode step of a few dozen tensor ops instead of a
framework forward.

The LM head goes through `rlvr.models.logprobs.lm_head_logits` like the trainer's
forward and the sampling step is the caller's function, so the numbers equal the generic
`transformers` path up to floating-point reduction order (tests/rollout prove it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.models.fused_llama import FusedLlama
from rlvr.models.lean.heap import release_kept
from rlvr.models.logprobs import lm_head_logits, packed_lm_head

Sampler = Callable[[torch.Tensor], torch.Tensor]  # (B, V) float32 logits -> (B,) token ids

PACK_STEPS = 4
"""Decodes of at least this many steps pack the weights once for MKL's products
(`rlvr.models.lean.packed`: the same floats; packing SmolLM2-135M takes about what one
step saves)."""


class StaticDecoder:
    """Prefill once per prompt, then decode `group_size` rows per prompt in lock-step.

    With `compile`, the one-token decode step runs through `torch.compile` (inductor, with
    dynamic shapes, so one compilation serves every batch size and cache column): a
    one-time cost of tens of seconds on a CPU, then fused elementwise kernels. Its numbers
    equal the eager step's up to floating-point rounding (tests/rollout prove it)."""

    def __init__(self, model: torch.nn.Module, fp32_head: bool, compile: bool = False) -> None:
        self.model = model
        self.fp32_head = fp32_head
        self.fused = FusedLlama(model)
        self.compiled = torch.compile(self.fused.forward, dynamic=True) if compile else None

    def decode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        group: int,
        max_new_tokens: int,
        sample: Sampler,
        stop: Callable[[torch.Tensor, int], bool],
    ) -> list[torch.Tensor]:
        """Left-padded prompts `input_ids` (P, L) → sampled tokens, one (P·group,) tensor
        per step; `stop(token, step)` is asked after every step whether every row ended."""
        prompts, width = input_ids.shape
        total, device = width + max_new_tokens, input_ids.device
        fused = self.fused
        fused.begin(total, device)
        prompt_cache = fused.new_cache(prompts, width, device)
        hidden, pos = fused.prefill(input_ids, attention_mask, prompt_cache)
        # The group shares its prompt: its prefilled columns are copied to each of its rows.
        cache = fused.new_cache(prompts * group, total, device)
        for (k, v), (k_prompt, v_prompt) in zip(cache, prompt_cache, strict=True):
            for full, part in ((k, k_prompt), (v, v_prompt)):
                full.view(prompts, group, *full.shape[1:])[..., :width, :] = part[:, None]
        hidden = hidden.repeat_interleave(group, 0)
        keys_ok = torch.ones(prompts * group, 1, 1, total, dtype=torch.bool, device=device)
        keys_ok[:, 0, 0, :width] = attention_mask.bool().repeat_interleave(group, 0)
        pos = pos[:, None].repeat_interleave(group, 0) - 1  # (B, 1)
        try:
            return self.decode_from(
                hidden, pos, width, keys_ok, cache, max_new_tokens, sample, stop
            )
        finally:
            fused.release()  # the fused weights' copy is not kept through the update

    def decode_from(
        self,
        hidden: torch.Tensor,
        pos: torch.Tensor,
        width: int,
        keys_ok: torch.Tensor,
        cache,
        max_new_tokens: int,
        sample: Sampler,
        stop: Callable[[torch.Tensor, int], bool],
    ) -> list[torch.Tensor]:
        """The decode steps after a prefill (also `rlvr.rollout.kv_session`'s, whose cache
        holds earlier turns): `hidden` (B, H) predicts the first token, which sits at
        rotary position `pos` + 1 (B, 1) and cache column `width`; `keys_ok` (B, 1, 1, W)
        says which of the cache's W ≥ width + max_new_tokens − 1 columns are keys."""
        fused = self.fused
        step_fn = fused.forward
        if self.compiled is not None:
            step_fn = self._compiled_step
            for table in (fused.cos, fused.sin_signed):
                _vary(table, 0)  # positions
            for tensor in (t for kv in cache for t in kv):
                _vary(tensor, 0, 2)  # rows, columns
        head = None
        if self.compiled is None and max_new_tokens >= PACK_STEPS:
            release_kept()  # not stacked on the heap the last update kept (`heap`)
            fused.pack(len(hidden))
            head = packed_lm_head(self.model, hidden)
        tokens = []
        for step in range(max_new_tokens):
            if step > 0:
                pos = pos + 1
                col = width + step - 1
                ok = keys_ok[..., : col + 1]
                hidden = step_fn(tokens[-1][:, None], pos, col, ok, cache)[:, -1]
            if head is not None:
                logits = head(hidden)
            else:
                logits = lm_head_logits(self.model, hidden, self.fp32_head)
            token = sample(logits)
            tokens.append(token)
            if stop(token, step):
                break
        return tokens

    def _compiled_step(self, ids, pos, col, allowed, cache) -> torch.Tensor:
        _vary(ids, 0)
        _vary(pos, 0)
        _vary(allowed, 0, 3)  # rows, the cache columns read so far
        return self.compiled(ids, pos, col, allowed, cache)


def _vary(tensor: torch.Tensor, *dims: int) -> None:
    """Tell `torch.compile` that these dimensions change from call to call, so that one
    compilation serves every batch: without this it specialises on the first batch size
    when that equals a model dimension (e.g. 128 rows and hidden size 128)."""
    for dim in dims:
        torch._dynamo.maybe_mark_dynamic(tensor, dim)
