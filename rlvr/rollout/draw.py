"""One token per row drawn exactly as `torch.multinomial(p, 1)` draws it on a CPU, in less
than half its time.

For one sample torch's CPU kernel races exponentials: q_v ~ Exp(1) from the generator,
then argmax_v p_v / q_v. Each q_v is `(float) −log1p(−u_v)`, u_v a double made from one
64-bit draw (`at::exponential_distribution`, the same draws as `torch.rand(...,
dtype=float64)`), and log1p is computed one element at a time, 20 ns a value: 31 ms of a
SmolLM2 decode step's 32 × 49,152 draws, 0.7 s of a 24-token rollout. Here u comes from
`torch.rand` and log1p from torch's vectorised kernel, which may differ from the C
library's scalar `log1p` in the last bit of a double and so, about once in 10¹⁰ values,
round to another float. Only the winner and the ratios within 2⁻²⁰ of it can be changed
by that: their q are recomputed with the C library's `log1p` and the race re-run among
them, so the token is torch's in every case (tests/rollout/test_rollout_draw.py compares
millions of draws).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct

import torch

MARGIN = 2.0**-20
"""Ratios within this fraction of the best are re-raced with exact q: one float ulp in q
and the divisions' rounding move a ratio by under 2⁻²², so no other can overtake."""


def _c_log1p():
    """The C library's `log1p` (double → double), the one ATen's scalar kernel calls; None
    where it cannot be loaded (then torch.multinomial draws)."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fn = libm.log1p
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return fn


LOG1P = _c_log1p()


def multinomial_one(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`torch.multinomial(probs, 1, generator=generator)` for (B, V) float32 probabilities
    on a CPU (the same token, the same generator state after); other inputs go to
    torch.multinomial itself. (B, 1) int64."""
    plain = probs.dim() != 2 or probs.dtype != torch.float32 or probs.shape[-1] > 2**24
    if plain or LOG1P is None or probs.device.type != "cpu" or generator.device.type != "cpu":
        return torch.multinomial(probs, 1, generator=generator)
    _check(probs)
    u = torch.rand(probs.shape, dtype=torch.float64, generator=generator)
    q = torch.neg(u).log1p_().neg_().to(torch.float32)
    ratio = torch.div(probs, q, out=q)
    token = ratio.argmax(-1, keepdim=True)
    best = ratio.gather(-1, token)
    close = ratio >= best * (1 - MARGIN)
    # A best of inf or NaN comes from q = 0 (u = 0), the same in both computations; a
    # subnormal one rounds too coarsely for the margin: every token of its row re-races.
    finite = torch.isfinite(best[:, 0])
    small = finite & (best[:, 0] < 2.0**-100)
    close[small] = probs[small] > 0
    close[~finite] = False
    for row in (close.sum(-1) > 1).nonzero()[:, 0].tolist():
        token[row, 0] = _race(probs[row], u[row], close[row].nonzero()[:, 0].tolist())
    return token


def _race(p: torch.Tensor, u: torch.Tensor, cols: list[int]) -> int:
    """argmax over `cols` of p_v / q_v in float32, q_v = (float) −log1p(−u_v) by the C
    library; the first of equal ratios, as argmax."""
    winner, best = cols[0], None
    for col in cols:
        q = struct.unpack("f", struct.pack("f", -LOG1P(-float(u[col]))))[0]  # C's cast
        ratio = float(p[col] / torch.tensor(q, dtype=torch.float32))
        if best is None or ratio > best:
            winner, best = col, ratio
    return winner


def _check(probs: torch.Tensor) -> None:
    """torch.multinomial's own checks, with its messages."""
    if not bool((probs.max() < float("inf")) & (probs.min() >= 0)):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bool((probs.sum(1) == 0).any()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
