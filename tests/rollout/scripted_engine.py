"""An engine that answers from a script, for hand-worked tests of the episode runner."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.rollout.base import Generation, SamplingParams, TextPrompts

EOS = "␄"  # marks the end of a scripted turn: the engine emits EOS there


class ScriptedEngine(TextPrompts):
    """`reply(context_text, sample_index)` → the turn's text; a trailing `EOS` ends it
    with the EOS token. Every sampled token gets log-prob −0.5; the turn is cut at
    `max_new_tokens` (truncated) like a real engine's."""

    def __init__(self, tokenizer, reply: Callable[[str, int], str]) -> None:
        self.tokenizer, self.reply = tokenizer, reply
        self.calls: list[list[str]] = []  # the contexts of every call, as text

    def generate_ids(self, prompts, params: SamplingParams, generator) -> Generation:
        contexts = [self.tokenizer.decode(p) for p in prompts]
        self.calls.append(contexts)
        rows = []
        for i, context in enumerate(contexts):
            for k in range(params.group_size):
                text = self.reply(context, k)
                eos = text.endswith(EOS)
                ids = self.tokenizer.encode(text.removesuffix(EOS))
                ids = ([*ids, self.tokenizer.eos_token_id] if eos else ids)[: params.max_new_tokens]
                ended = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
                rows.append((i, ids, not ended))
        width = max(len(ids) for _, ids, _ in rows)
        pad = self.tokenizer.pad_token_id
        response = torch.tensor([ids + [pad] * (width - len(ids)) for _, ids, _ in rows])
        mask = torch.tensor([[1.0] * len(ids) + [0.0] * (width - len(ids)) for _, ids, _ in rows])
        return Generation(
            prompt_ids=[list(prompts[i]) for i, _, _ in rows],
            response_ids=response,
            response_mask=mask,
            sampler_logprobs=-0.5 * mask,
            truncated=torch.tensor([cut for _, _, cut in rows]),
            prompt_index=torch.tensor([i for i, _, _ in rows]),
            texts=[self.tokenizer.decode(ids) for _, ids, _ in rows],
        )

    def sync_weights(self) -> None:
        pass
