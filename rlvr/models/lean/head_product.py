"""The LM head's products with its (V, H) weight on a CPU, over slices of the vocabulary:
the logits z = h·Wᵀ + b and the weight's gradient dW = dzᵀ·h, `SLICE` rows of W at a
time. Each logit, and each element of dW, is one dot product over H (over the chunk's
positions for dW), which slicing V leaves whole: the floats are one product's, bit for
bit (tests/models/test_models_head_product.py). What changes is where the work happens:
with SmolLM2's 49,152 × 576 head, one product streams a 113 MB weight (or writes a
113 MB gradient) through the cache for every block of positions, while a 1,024-row slice
(2.4 MB) stays in it. In a profiled 64-token step the decode step's head ran at 62.5
GFLOP/s instead of 54 and dW at 94 instead of 60 (benchmarks/RESULTS.md), and the
gradient's per-chunk term needs a (1,024, H) buffer, not a (V, H) one. On other devices
one product, as before."""

from __future__ import annotations

import itertools

import torch

from rlvr.models.lean.packed import PackedWeight, pack

SLICE = 1024  # rows of the head's weight per product on a CPU


def head_logits(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor
) -> torch.Tensor:
    """h·Wᵀ + b written into `out` (rows, V), for (rows, H) `h` and a (V, H) weight:
    `torch.mm` (`torch.addmm` with a bias) over slices of W's rows on a CPU, one call
    elsewhere; the same floats either way."""
    for rows in _slices(weight.shape[0], h.device):
        wt = weight[rows].t()
        if bias is None:
            torch.mm(h, wt, out=out[:, rows])
        else:
            torch.addmm(bias[rows], h, wt, out=out[:, rows])
    return out


def add_weight_grad(total: torch.Tensor | None, dz: torch.Tensor, h: torch.Tensor):
    """total + dzᵀ·h, in place, for (rows, V) `dz` and (rows, H) `h`; dzᵀ·h itself (a new
    (V, H) tensor) when `total` is None. Each slice's product is added to `total` while it
    is in the cache, from a buffer of one slice's rows (fewer than 2·SLICE): the floats of
    one product into a (V, H) buffer added at once (each element is one product's element
    plus one addition)."""
    slices = _slices(dz.shape[1], dz.device)
    if total is None:
        total = h.new_empty(dz.shape[1], h.shape[1])
        for rows in slices:
            torch.mm(dz[:, rows].t(), h, out=total[rows])
        return total
    scratch = h.new_empty(max(r.stop - r.start for r in slices), h.shape[1])
    for rows in slices:
        part = scratch[: rows.stop - rows.start]
        total[rows].add_(torch.mm(dz[:, rows].t(), h, out=part))
    return total


def _slices(vocab: int, device: torch.device) -> list[slice]:
    """Slices of the head's `vocab` rows: `SLICE` at a time on a CPU, the last one also
    taking the remainder, so that none is narrow (MKL multiplies narrow products, 11 rows
    or fewer here, with other kernels, whose floats differ); all at once on other devices."""
    count = max(1, vocab // SLICE) if device.type == "cpu" else 1
    bounds = [i * SLICE for i in range(count)] + [vocab]
    return [slice(start, stop) for start, stop in itertools.pairwise(bounds)]


def packed_head(weight: torch.Tensor, bias: torch.Tensor | None, rows: int):
    """`h ↦ head_logits(h, weight, bias, ·)` for (rows, H) `h`, each slice of W packed once
    for MKL's products (`rlvr.models.lean.packed`: the same floats), as a function; None
    where a slice cannot be packed as exactly (then `head_logits` is the way)."""
    slices = _slices(weight.shape[0], weight.device)
    packed = [pack(weight[s], rows, None if bias is None else bias[s]) for s in slices]
    if not all(isinstance(p, PackedWeight) for p in packed):
        return None

    def logits(h: torch.Tensor) -> torch.Tensor:
        out = h.new_empty(h.shape[0], weight.shape[0])
        for s, p in zip(slices, packed, strict=True):
            out[:, s] = p.linear(h, None if bias is None else bias[s])
        return out

    return logits
