"""The `Rollout` record: one optimizer step's responses, travelling the whole pipeline.

The sampler creates it (ids, masks, sampler log-probs, truncation), the verifier adds
correctness and reward, the trainer adds old/reference/teacher log-probs and values. No stage
re-derives what an earlier stage knew.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from rlvr.algo.policy.masks import policy_mask
from rlvr.rollout import Generation


@dataclass
class Rollout:
    """B responses, grouped by prompt; tensors are (B,) or (B, T)."""

    prompt_ids: list[list[int]]  # (B) the prompt's token ids
    response_ids: torch.Tensor  # (B, T) long, right-padded
    response_mask: torch.Tensor  # (B, T) float: generated tokens incl. EOS
    sampler_logprobs: torch.Tensor  # (B, T) what the rollout engine reported
    truncated: torch.Tensor  # (B,) bool
    group_ids: torch.Tensor  # (B,) long: one id per prompt group, unique in the step
    problem_uids: list[str]  # (B) which problem each response answers
    texts: list[str]  # (B) decoded responses
    correct: torch.Tensor  # (B,) float 0/1: raw correctness from the verifier
    formatted: torch.Tensor  # (B,) float 0/1: the answer was in the expected format
    rewards: torch.Tensor  # (B,) float: the correctness reward
    old_logprobs: torch.Tensor | None = None  # (B, T) π_old: the policy before this step's updates
    ref_logprobs: torch.Tensor | None = None  # (B, T) the frozen reference
    values: torch.Tensor | None = None  # (B, T) the critic's V before this step's updates
    teacher_logprobs: torch.Tensor | None = None  # (B, T) a teacher's log π_T of these tokens
    forced_mask: torch.Tensor | None = None  # (B, T) 1 on engine-inserted tokens (interruption)
    reward_failed: torch.Tensor | None = None  # (B,) bool: a reward function failed on it
    episodes: list | None = None  # (B) EpisodeRecord of multi-turn episodes (forced: observations)
    reward_values: list | None = None  # (B) each reward function's value, by name (Scored.values)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)

    @property
    def loss_mask(self) -> torch.Tensor:
        """(B, T) tokens the policy sampled: `response_mask` minus engine-inserted tokens.

        `response_mask` says what the model attends to; `loss_mask` what it is trained on.
        """
        return policy_mask(self.response_mask, self.forced_mask)

    def select(self, rows: torch.Tensor) -> Rollout:
        """The rows at `rows` (a long index tensor), every field sliced alike."""
        index = rows.tolist()
        sliced = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                sliced[f.name] = value[rows]
            elif isinstance(value, list):
                sliced[f.name] = [value[i] for i in index]
            else:
                sliced[f.name] = value
        return replace(self, **sliced)

    def by_length(self, rows: torch.Tensor) -> torch.Tensor:
        """`rows` (a long index tensor) ordered by packed length, prompt + response, so
        that micro-batches of neighbours pad little; ties keep their order."""
        prompt = torch.tensor([len(self.prompt_ids[i]) for i in rows.tolist()], dtype=torch.long)
        lengths = prompt + (self.response_mask[rows] > 0).sum(-1)
        return rows[torch.argsort(lengths, stable=True)]

    def forward_rows(self, fn, micro_batch_size: int) -> torch.Tensor:
        """`fn(prompt_ids, response_ids, response_mask)` → (b, T) over every row, in
        length-sorted micro-batches and without gradient (π_old, π_ref and V_old
        forwards); rows come back in their own order."""
        order = self.by_length(torch.arange(len(self)))
        with torch.no_grad():
            parts = [
                fn(
                    [self.prompt_ids[i] for i in rows.tolist()],
                    self.response_ids[rows],
                    self.response_mask[rows],
                )
                for rows in torch.split(order, micro_batch_size)
            ]
        out = torch.cat(parts)
        return out.new_empty(out.shape).index_copy_(0, order, out)

    @staticmethod
    def concat(parts: list[Rollout]) -> Rollout:
        """Rows of several rollouts, padding (B, T) tensors to the longest T."""
        width = max(p.response_ids.shape[1] for p in parts)
        merged = {}
        for f in fields(Rollout):
            values = [getattr(p, f.name) for p in parts]
            if all(v is None for v in values):
                merged[f.name] = None
                continue
            if isinstance(next(v for v in values if v is not None), list):
                values = [
                    [None] * len(p) if v is None else v for p, v in zip(parts, values, strict=True)
                ]
            elif any(v is None for v in values):  # e.g. only some parts were interrupted
                like = next(v for v in values if v is not None)
                values = [
                    like.new_zeros((len(p), *like.shape[1:])) if v is None else v
                    for p, v in zip(parts, values, strict=True)
                ]
            if values[0] is None:
                merged[f.name] = None
            elif isinstance(values[0], list):
                merged[f.name] = [x for v in values for x in v]
            elif values[0].dim() == 2:
                merged[f.name] = torch.cat([_pad_to(v, width) for v in values])
            else:
                merged[f.name] = torch.cat(values)
        return Rollout(**merged)


def _pad_to(x: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def from_generation(
    gen: Generation,
    uids: list[str],
    group_offset: int,
    correct: list[bool],
    formatted: list[bool],
    rewards: list[float],
    reward_failed: list[bool] | None = None,
    reward_values: list[dict[str, float | None]] | None = None,
) -> Rollout:
    """A Rollout from an engine's Generation and the verifier's verdicts."""
    prompt_uids = [uids[i] for i in gen.prompt_index.tolist()]
    return Rollout(
        prompt_ids=gen.prompt_ids,
        response_ids=gen.response_ids,
        response_mask=gen.response_mask,
        sampler_logprobs=gen.sampler_logprobs,
        truncated=gen.truncated,
        group_ids=gen.prompt_index + group_offset,
        problem_uids=prompt_uids,
        texts=gen.texts,
        correct=torch.tensor(correct, dtype=torch.float32),
        formatted=torch.tensor(formatted, dtype=torch.float32),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        forced_mask=gen.forced_mask,
        reward_failed=None
        if reward_failed is None
        else torch.tensor(reward_failed, dtype=torch.bool),
        episodes=gen.episodes,
        reward_values=reward_values,
    )
