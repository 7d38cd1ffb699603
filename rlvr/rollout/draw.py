"""One token per row drawn exactly as `torch.multinomial(p, 1)` draws it on a CPU, in
under half its time.

For one sample torch's CPU kernel races exponentials: q_v ~ Exp(1) from the generator,
then argmax_v p_v / q_v (float32, the first of equal ratios). Each q_v is `(float)
−log1p(−u_v)`, u_v a double made from one 64-bit draw (`at::exponential_distribution`,
the same draws as `torch.rand(..., dtype=float64)`), and log1p is computed one element at
a time, 20 ns a value: most of a SmolLM2 decode step's draw (32 × 49,152 exponentials).

Here u comes from `torch.rand` and no logarithm is taken over the row. Since
u ≤ −log1p(−u) ≤ u / (1 − u), each ratio lies between p/u · (1 − u) and p/u. The leader,
the token of largest p/u, has a ratio of at least L = p/u · (1 − u), so the winner is
among the tokens whose p/u reaches L (less a margin for rounding, `MARGIN`). Mostly the
leader alone does, and is torch's token; where others do, their q are computed with the C
library's `log1p`, the function ATen's scalar kernel calls, and the race is re-run among
them in float32, so the token is torch's in every case (tests/rollout/test_rollout_draw.py
compares millions of draws). A row the bounds cannot settle (a draw of u = 0, or ratios
too small to round relatively) is raced over the whole row.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import torch

MARGIN = 2.0**-18
"""Tokens whose p/u reaches L·(1 − MARGIN) are raced. torch's float32 q and division move a
ratio from p/q by under 2⁻²², the float32 p/u here moves by under 2⁻²² too and L (in
float64) by under 2⁻⁵⁰: the winner, whose ratio is at least the leader's, reaches
L·(1 − 2⁻¹⁹·⁵) at worst."""

SMALLEST = 2.0**-100
"""Below this a ratio may be subnormal in float32, rounded absolutely rather than
relatively: a row whose L is smaller is raced whole."""


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
    return race(probs, u)


def race(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """torch's token for probabilities `probs` (B, V) float32 and uniform draws `u`
    (B, V) float64 in [0, 1): argmax_v p_v / (float) −log1p(−u_v), the first of equal
    ratios. (B, 1) int64."""
    upper = torch.div(probs, u.to(torch.float32))  # p/u ≥ the ratio (2⁻²² either way)
    _, token = upper.max(-1, keepdim=True)  # the leader (NaN first, as argmax)
    u_lead = u.gather(-1, token)
    bound = probs.gather(-1, token).double() / u_lead * (1 - u_lead)  # ≤ every winner's ratio
    unsettled = ~(bound[:, 0] >= SMALLEST)  # also NaN and inf, from p/0: a u of 0
    threshold = (bound * (1 - MARGIN)).to(torch.float32)
    lead = upper.gather(-1, token)
    runner_up = upper.scatter_(-1, token, -1.0).amax(-1, keepdim=True)
    upper.scatter_(-1, token, lead)
    several = (runner_up >= threshold)[:, 0] & ~unsettled
    if bool(several.any()) or bool(unsettled.any()):
        token = token.clone()
        for row in several.nonzero()[:, 0].tolist():
            cols = (upper[row] >= threshold[row]).nonzero()[:, 0]
            token[row, 0] = _race(probs[row], u[row], cols)
        for row in unsettled.nonzero()[:, 0].tolist():
            token[row, 0] = _race_all(probs[row], u[row])
    return token


def _race(p: torch.Tensor, u: torch.Tensor, cols: torch.Tensor) -> int:
    """argmax over `cols` of p_v / q_v in float32, q_v = (float) −log1p(−u_v) by the C
    library; the first of equal ratios, as argmax."""
    q = torch.tensor([-LOG1P(-x) for x in u[cols].tolist()], dtype=torch.float64)
    ratio = p[cols] / q.to(torch.float32)  # float32 division, as torch's kernel
    return int(cols[ratio.argmax()])


def _race_all(p: torch.Tensor, u: torch.Tensor) -> int:
    """The race over a whole row that the bounds cannot settle. A u of 0 gives q = 0, the
    same float however log1p is computed, and a ratio of inf (or NaN where p = 0) that
    torch's argmax picks as the kernel's does; otherwise every token of non-zero
    probability is raced with exact q (a ratio that may be subnormal rounds absolutely)."""
    ratio = p / torch.neg(u).log1p_().neg_().to(torch.float32)
    best = int(ratio.argmax())
    if not bool(torch.isfinite(ratio[best])):
        return best
    return _race(p, u, (p > 0).nonzero()[:, 0])


def _check(probs: torch.Tensor) -> None:
    """torch.multinomial's own checks, with its messages."""
    low, high = torch.aminmax(probs)
    if not bool((high < float("inf")) & (low >= 0)):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bool((probs.sum(1) == 0).any()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
