"""Forced length interruption (ScaleRL, arXiv 2510.13786, §3.2 "interruptions"): a response
that reaches a thinking budget without ending gets an end-of-thinking phrase appended, and
the model then writes its final answer within the remaining budget.

The phrase is inserted, not sampled: its tokens are context for the answer (they are in
`response_mask`) but carry `forced_mask` = 1 so that they are never trained on and their
sampler log-probs are 0.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlvr.rollout.base import Generation, RolloutEngine, SamplingParams, TextPrompts


class ForcedInterruption(TextPrompts):
    """Wraps an engine: generate up to `budget` tokens, interrupt, let the model finish."""

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer,
        budget: int,
        phrase: str,
        max_new_tokens: int | None = None,
    ) -> None:
        """With `max_new_tokens`, refuse a budget and phrase that leave no room to answer."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.budget = budget
        self.phrase_ids = tokenizer.encode(phrase)
        if budget < 1 or not self.phrase_ids:
            raise ValueError(
                f"think_budget must be ≥ 1 and the phrase non-empty, got {budget}, {phrase!r}"
            )
        if max_new_tokens is not None and self.answer_room(max_new_tokens) < 1:
            raise ValueError(
                f"think_budget={budget} plus interrupt_phrase {phrase!r} leave no room for an "
                f"answer within max_new_tokens={max_new_tokens}"
            )

    def answer_room(self, max_new_tokens: int) -> int:
        """Tokens left for the answer after the thinking budget and the inserted phrase."""
        return max_new_tokens - self.budget - len(self.phrase_ids)

    def sync_weights(self) -> None:
        self.engine.sync_weights()

    def score_ids(self, prompts, responses) -> list[torch.Tensor]:
        return self.engine.score_ids(prompts, responses)

    def generate_ids(
        self, prompts, params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        remaining = self.answer_room(params.max_new_tokens)
        if remaining < 1:
            return self.engine.generate_ids(prompts, params, generator)
        first = self.engine.generate_ids(
            prompts, replace(params, max_new_tokens=self.budget), generator
        )
        rows = first.truncated.nonzero().squeeze(-1).tolist()
        if not rows:
            return first
        contexts = [
            first.prompt_ids[r] + first.response_ids[r].tolist() + self.phrase_ids for r in rows
        ]
        tail = self.engine.generate_ids(
            contexts, replace(params, group_size=1, max_new_tokens=remaining), generator
        )
        return _stitch(first, rows, tail, self.phrase_ids, self.tokenizer)


def _stitch(
    first: Generation, rows: list[int], tail: Generation, phrase: list[int], tokenizer
) -> Generation:
    """Rows of `first` listed in `rows` become response + phrase + tail response."""
    width = first.response_ids.shape[1] + len(phrase) + tail.response_ids.shape[1]
    pad = tokenizer.pad_token_id
    ids = torch.full((len(first.texts), width), pad, dtype=torch.long)
    mask = torch.zeros(ids.shape)
    forced = torch.zeros(ids.shape)
    logprobs = torch.zeros(ids.shape)
    steps = first.response_ids.shape[1]
    ids[:, :steps], mask[:, :steps] = first.response_ids, first.response_mask
    logprobs[:, :steps] = first.sampler_logprobs
    truncated, texts = first.truncated.clone(), list(first.texts)
    for k, r in enumerate(rows):
        n, m = int(first.response_mask[r].sum()), int(tail.response_mask[k].sum())
        at = n + len(phrase)
        ids[r, n:at] = torch.tensor(phrase)
        mask[r, n:at] = 1.0
        forced[r, n:at] = 1.0
        ids[r, at : at + m] = tail.response_ids[k, :m]
        mask[r, at : at + m] = 1.0
        logprobs[r, at : at + m] = tail.sampler_logprobs[k, :m]
        truncated[r] = tail.truncated[k]
        texts[r] = tokenizer.decode(ids[r, : at + m].tolist(), skip_special=True)
    used = int(mask.sum(0).nonzero().max()) + 1
    return replace(
        first,
        response_ids=ids[:, :used],
        response_mask=mask[:, :used],
        sampler_logprobs=logprobs[:, :used],
        truncated=truncated,
        texts=texts,
        forced_mask=forced[:, :used],
    )
