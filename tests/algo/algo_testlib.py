"""Shared builders for the algorithm-core tests: ragged batches and gradient helpers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algo import PreparedBatch, Recipe, policy_loss, prepare_batch

F64 = torch.float64


def padded(rows: list[list[float]], pad: float = 0.0) -> torch.Tensor:
    """Ragged rows → (N, T) float64, padded with `pad` (use a loud pad to prove it is ignored)."""
    length = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (length - len(r)) for r in rows], dtype=F64)


def mask_of(lengths: list[int], length: int | None = None) -> torch.Tensor:
    """(N, T) float64 response mask of right-padded responses."""
    length = length or max(lengths)
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).to(F64)


@dataclass
class Batch:
    """A rollout batch as the loop hands it to prepare_batch / policy_loss."""

    group_ids: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    correct: torch.Tensor
    truncated: torch.Tensor
    max_new_tokens: int
    teacher_logprobs: torch.Tensor | None = None


def random_batch(
    seed: int,
    group_sizes: list[int],
    lengths: list[int],
    max_new_tokens: int = 7,
    off_policy: float = 0.3,
    correct: list[int] | None = None,
) -> Batch:
    """Ragged batch with log-probs ≠ old log-probs ≠ ref log-probs; padding holds garbage."""
    gen = torch.Generator().manual_seed(seed)
    n = sum(group_sizes)
    assert len(lengths) == n
    mask = mask_of(lengths)
    length = mask.shape[1]
    logprobs = -2.0 * torch.rand(n, length, generator=gen, dtype=F64) - 0.05
    old = logprobs + off_policy * torch.randn(n, length, generator=gen, dtype=F64)
    ref = logprobs + 0.2 * torch.randn(n, length, generator=gen, dtype=F64)
    values = torch.rand(n, length, generator=gen, dtype=F64)
    if correct is None:
        correct_t = torch.randint(0, 2, (n,), generator=gen).to(F64)
    else:
        correct_t = torch.tensor(correct, dtype=F64)
    teacher = logprobs + 0.5 * torch.randn(n, length, generator=gen, dtype=F64)  # drawn last
    # Padding is garbage on purpose: nothing may read it.
    pad = mask == 0
    teacher = teacher.masked_fill(pad, -5.0)
    logprobs = logprobs.masked_fill(pad, -7.0)
    old = old.masked_fill(pad, 3.0)
    group_ids = torch.repeat_interleave(
        torch.arange(len(group_sizes)) * 3 + 5, torch.tensor(group_sizes)
    )
    return Batch(
        group_ids=group_ids,
        mask=mask,
        logprobs=logprobs,
        old_logprobs=old,
        ref_logprobs=ref,
        values=values,
        rewards=correct_t.clone(),
        correct=correct_t,
        truncated=torch.tensor(lengths) >= max_new_tokens,
        max_new_tokens=max_new_tokens,
        teacher_logprobs=teacher,
    )


def prepare(recipe: Recipe, batch: Batch) -> PreparedBatch:
    return prepare_batch(
        recipe,
        rewards=batch.rewards,
        correct=batch.correct,
        truncated=batch.truncated,
        response_mask=batch.mask,
        group_ids=batch.group_ids,
        max_new_tokens=batch.max_new_tokens,
        old_logprobs=batch.old_logprobs,
        ref_logprobs=batch.ref_logprobs,
        values=batch.values if recipe.needs_critic else None,
        teacher_logprobs=batch.teacher_logprobs,
    )


def loss_of_rows(
    recipe: Recipe,
    batch: Batch,
    prepared: PreparedBatch,
    logprobs: torch.Tensor,
    rows: torch.Tensor,
):
    """policy_loss on the given rows of a leaf `logprobs` (a micro-batch)."""
    sel = lambda x: None if x is None else x[rows]  # noqa: E731
    return policy_loss(
        recipe,
        logprobs=logprobs[rows],
        old_logprobs=batch.old_logprobs[rows],
        advantages=prepared.advantages[rows],
        loss_weights=prepared.loss_weights[rows],
        response_mask=prepared.response_mask[rows],
        ref_logprobs=batch.ref_logprobs[rows],
        nll_weights=sel(prepared.nll_weights),
    )


def loss_and_grad(
    recipe: Recipe,
    batch: Batch,
    prepared: PreparedBatch,
    row_sets: list[torch.Tensor] | None = None,
) -> tuple[float, torch.Tensor]:
    """Σ of the micro-batch losses and the accumulated ∂/∂logπ (whole batch if no row_sets)."""
    logprobs = batch.logprobs.clone().requires_grad_(True)
    if row_sets is None:
        row_sets = [torch.arange(batch.mask.shape[0])]
    total = 0.0
    for rows in row_sets:
        if len(rows) == 0:
            continue
        loss, _ = loss_of_rows(recipe, batch, prepared, logprobs, rows)
        loss.backward()
        total += float(loss.detach())
    grad = logprobs.grad if logprobs.grad is not None else torch.zeros_like(logprobs)
    return total, grad
