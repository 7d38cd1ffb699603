"""The LM head over chunks of positions, for a gradient through it: log π(target) and the
entropy from final hidden states with fewer passes over each chunk's logits, and fewer
of them kept, than autograd through `torch.utils.checkpoint` (`rlvr.models.logprobs`
chooses which applies). Each pass over the chunks writes every chunk's logits (and the
entropy's and p's intermediates) into buffers allocated once for the pass, not fresh ones
per chunk: with freed pages kept for reuse (rlvr/train/allocation.py) a freed chunk's
blocks were not always reused, and LoRA's 64-token SmolLM2 step peaked in this forward
(benchmarks/RESULTS.md)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.models.lean.head_product import add_weight_grad, head_logits
from rlvr.models.precision import full_precision

Process = Callable[[torch.Tensor], torch.Tensor]  # a model's own logit processing


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T; at T = 1 the logits themselves (x / 1 is x exactly, so the same numbers
    without a pass over positions × V values, nor one in the backward)."""
    return logits if temperature == 1.0 else logits / temperature


def gathered_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor | None = None
) -> torch.Tensor:
    """log softmax(logits)[target] = logits[target] − logsumexp(logits), (...,) from
    (..., V) logits (`lse`: that logsumexp when the caller has it): the full log-softmax
    is never materialised (nor kept for backward)."""
    picked = logits.gather(-1, targets[..., None]).squeeze(-1)
    return picked - (logits.logsumexp(-1) if lse is None else lse)


class FrozenHeadLogprobs(torch.autograd.Function):
    """log π(target) = z_target − logsumexp(z), z = (W·h + b) / T, for hidden states `h`
    (..., H) under a head whose weights W (V, H) do not train, with the gradient for `h`
    computed in the forward instead of recomputing the logits in the backward:

        ∂ log π(t) / ∂h = (W_t − Σ_v p_v W_v) / T = (W_t − pᵀW) / T,    p = exp(z − lse z),

    one (positions, H) tensor kept for the backward, which is then dh = g · that. Per
    chunk of `rows` positions that costs two products with W (z, and pᵀW), where autograd
    with `checkpoint` costs three (z; z again in the backward; dz·W), and no logits are
    kept. The log-probs (and entropy) are the checkpointed path's bit for bit; the gradient
    equals autograd's up to the order of the float sums
    (tests/models/test_models_frozen_head.py)."""

    @staticmethod
    def forward(ctx, hidden, targets, head, process, temperature, return_entropy, rows):
        flat = hidden.detach().reshape(-1, hidden.shape[-1])
        weight = head.weight.float()
        logprobs, entropies, slopes = [], [], []
        with torch.no_grad(), full_precision(hidden.device):
            bias = None if head.bias is None else head.bias.float()
            logits, scratch, probs = _chunk_buffers(3, rows, flat, weight)
            for h, t in zip(flat.split(rows), targets.reshape(-1).split(rows), strict=True):
                n = h.shape[0]
                z = _logits_into(logits[:n], h.float(), weight, bias, process, temperature)
                lse = logsumexp_into(z, scratch[:n])  # once, for the log-probs and p
                logprobs.append(gathered_logprobs(z, t, lse))
                if return_entropy:
                    entropies.append(entropy_into(z, scratch[:n], probs[:n]))
                p = torch.sub(z, lse[:, None], out=scratch[:n]).exp_()
                slopes.append(tempered(weight[t] - p @ weight, temperature))
        ctx.save_for_backward(torch.cat(slopes))
        ctx.hidden_shape, ctx.hidden_dtype = hidden.shape, hidden.dtype
        return _chunked_outputs(ctx, targets, logprobs, entropies if return_entropy else None)

    @staticmethod
    def backward(ctx, grad, *_):
        (slopes,) = ctx.saved_tensors
        dh = grad.reshape(-1, 1).float() * slopes
        return dh.to(ctx.hidden_dtype).view(ctx.hidden_shape), *[None] * 6


class TrainedHeadLogprobs(torch.autograd.Function):
    """log π(target) = z_target − logsumexp(z), z = W·h / T, and the entropy, for hidden
    states `h` (..., H) under a bias-free head whose weight W (V, H) trains: the
    checkpointed path's numbers and products, with fewer passes over each chunk's logits.

    The forward keeps each chunk's logsumexp, not its logits. The backward recomputes a
    chunk's z and turns it into its gradient in place,

        ∂ log π(t) / ∂z = onehot(t) − p,    p = exp(z − lse),

    dz = −g·exp(z − lse) with g added at the target, which is autograd's
    `grad · exp(self − result)` plus the gather's scatter, the same floats; then
    dh = dz·W and dW = dzᵀ·h, summed over chunks from the last, the order in which autograd
    adds the checkpointed chunks' gradients. So log-probs, entropy and every gradient are
    the checkpointed path's bit for bit (tests/models/test_models_trained_head.py), and one
    buffer of logits is alive where autograd's backward allocates several per chunk.

    With `keep` the forward keeps each chunk's p = exp(z − lse), the same floats, and the
    backward takes them instead of recomputing z: one product with W per chunk fewer, for
    (positions, V) floats kept from the forward to the backward, each chunk's freed once
    its gradient is out (`rlvr.models.logprobs.keeps_head_probabilities` decides)."""

    @staticmethod
    def forward(ctx, hidden, targets, weight, process, temperature, return_entropy, rows, keep):
        flat = hidden.detach().reshape(-1, hidden.shape[-1]).float()
        targets_flat = targets.reshape(-1)
        with torch.no_grad(), full_precision(hidden.device):
            logprobs, entropies, lses, probs = _head_chunks(
                flat, targets_flat, weight.float(), None, process, temperature, return_entropy,
                rows, keep,
            )  # fmt: skip
        ctx.probs = probs if keep else None
        ctx.save_for_backward(flat, targets_flat, weight, torch.cat(lses))
        ctx.process, ctx.temperature, ctx.rows = process, temperature, rows
        ctx.hidden_shape, ctx.hidden_dtype = hidden.shape, hidden.dtype
        return _chunked_outputs(ctx, targets, logprobs, entropies if return_entropy else None)

    @staticmethod
    def backward(ctx, grad, *_):
        flat, targets, weight, lse = ctx.saved_tensors
        chunks = [c.split(ctx.rows) for c in (flat, targets, grad.reshape(-1).float(), lse)]
        dh, dw = [], None
        probs, ctx.probs = ctx.probs, None  # a second backward (retain_graph) recomputes
        with full_precision(flat.device):
            w = weight.float()
            logits = None if probs else _chunk_buffers(1, ctx.rows, flat, w)[0]
            for h, t, g, chunk_lse in reversed(list(zip(*chunks, strict=True))):
                if probs:
                    p = probs.pop()  # freed once this chunk's gradient is out
                else:
                    z = _logits_into(logits[: h.shape[0]], h, w, None, ctx.process, ctx.temperature)
                    p = z.sub_(chunk_lse[:, None]).exp_()
                dz = p.mul_(-g[:, None])
                dz = _tempered_in_place(
                    dz.scatter_add_(-1, t[:, None], g[:, None]), ctx.temperature
                )
                dh.append(dz.mm(w))
                dw = add_weight_grad(dw, dz, h)  # dw + this chunk's dzᵀ·h, in place
        grad_hidden = torch.cat(dh[::-1]).to(ctx.hidden_dtype).view(ctx.hidden_shape)
        return grad_hidden, None, dw.to(weight.dtype), *[None] * 5


def logprobs_without_grad(hidden, targets, head, process, temperature, return_entropy, rows):
    """(log π(target), [entropy]) per position of `targets` from hidden states (..., H),
    without a gradient (π_ref's and π_old's forwards): the numbers of the chunked path in
    `rlvr.models.logprobs.head_logprobs`, each chunk's logits, exp(z − max z) and the
    entropy's intermediates written into two buffers allocated once for the pass."""
    flat = hidden.reshape(-1, hidden.shape[-1]).float()
    with torch.no_grad(), full_precision(hidden.device):
        bias = None if head.bias is None else head.bias.float()
        logprobs, entropies, _, _ = _head_chunks(
            flat, targets.reshape(-1), head.weight.float(), bias, process, temperature,
            return_entropy, rows, keep=False,
        )  # fmt: skip
    columns = [logprobs, entropies] if return_entropy else [logprobs]
    return tuple(torch.cat(column).view(targets.shape) for column in columns)


def _head_chunks(flat, targets, weight, bias, process, temperature, return_entropy, rows, keep):
    """Per chunk of `rows` float32 positions: log π(target), the entropy (if asked) and
    logsumexp z, each chunk's logits written into one buffer and exp(z − max z) and the
    entropy's intermediates into another, allocated once for the pass."""
    logprobs, entropies, lses, probs = [], [], [], []
    logits, scratch = _chunk_buffers(2, rows, flat, weight)
    for h, t in zip(flat.split(rows), targets.split(rows), strict=True):
        n = h.shape[0]
        z = _logits_into(logits[:n], h, weight, bias, process, temperature)
        lses.append(logsumexp_into(z, scratch[:n]))
        logprobs.append(gathered_logprobs(z, t, lses[-1]))
        if keep:  # p = exp(z − lse), as the backward would compute it from z recomputed
            probs.append(torch.sub(z, lses[-1][:, None]).exp_())
        if return_entropy:  # z is not read again: p is written over it
            entropies.append(entropy_into(z, scratch[:n], z))
    return logprobs, entropies, lses, probs


def logsumexp_into(z: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """log Σ_v exp z_v per row of (rows, V) `z`, with exp(z − max z) written into `scratch`:
    ATen's `logsumexp` step by step (the max, set to 0 where it is ±inf, the shifted
    exponentials' sum, its log plus the max), whose own (rows, V) temporary this replaces;
    the same floats (tests/models/test_models_trained_head.py)."""
    maxes = torch.amax(z, -1, keepdim=True)
    flat_maxes = maxes.squeeze(-1)  # a view: the fill below changes `maxes` too, as ATen's
    flat_maxes.masked_fill_(flat_maxes.abs() == float("inf"), 0)
    total = torch.sum(torch.sub(z, maxes, out=scratch).exp_(), -1)
    return total.log_().add_(flat_maxes)


def _chunk_buffers(count: int, rows: int, flat: torch.Tensor, weight: torch.Tensor):
    """`count` float32 buffers of (chunk rows, V) for the chunks of `flat`'s positions under
    a (V, H) head, one allocation for all of them; a shorter last chunk takes a prefix."""
    shape = (count, min(rows, flat.shape[0]), weight.shape[0])
    return torch.empty(shape, device=flat.device).unbind(0)


def _logits_into(
    out: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    process: Process,
    temperature: float,
) -> torch.Tensor:
    """tempered(process(h·Wᵀ + b), T), written into `out` where the processing leaves it
    there (the image placeholder's fill does not: it returns a new tensor). The same floats
    as `F.linear` then `tempered`: the same product (over slices of V on a CPU,
    `head_logits`), and x / T computed in place."""
    z = head_logits(h, weight, bias, out)
    return _tempered_in_place(process(z), temperature)


def _tempered_in_place(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`tempered` overwriting `logits`."""
    return logits if temperature == 1.0 else logits.div_(temperature)


def entropy_into(z: torch.Tensor, log_probs: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """H = −Σ_v p_v log p_v per row of (rows, V) logits `z`, without a gradient, its (rows,
    V) intermediates written into the buffers given (`log_probs`, `probs`): the clamp and
    the product in place."""
    torch.log_softmax(z, -1, out=log_probs)
    floor = torch.finfo(z.dtype).min  # 0·log 0 = 0, not 0·(−inf) = NaN
    return -torch.exp(log_probs, out=probs).mul_(log_probs.clamp_(min=floor)).sum(-1)


def _chunked_outputs(ctx, targets, logprobs, entropies) -> tuple[torch.Tensor, ...]:
    """A head Function's outputs from its chunks: (log π, [entropy]) shaped as `targets`,
    the entropy (logged, or compared by a recipe) marked as having no gradient."""
    logprob = torch.cat(logprobs).view(targets.shape)
    if entropies is None:
        return (logprob,)
    entropy = torch.cat(entropies).view(targets.shape)
    ctx.mark_non_differentiable(entropy)
    return logprob, entropy
