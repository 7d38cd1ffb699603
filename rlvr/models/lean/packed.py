"""Weights packed once for MKL's matrix product, for the decode loop's products on a CPU.

Every decode step multiplies the same rows (a rollout's B sequences) by every weight of
the model, and `F.linear` has MKL repack each weight into its kernel's layout at every
call: with B = 32 that repacking costs about as much as the product. MKL can pack a weight
once (`cblas_sgemm_pack`, torch's `mkl::_mkl_reorder_linear_weight`) and multiply by the
packed copy after (`mkl::_mkl_linear`). Its products are the same floats as `F.linear`'s
on the CPUs measured (the same kernel, the same order of additions), but nothing promises
it on every CPU: the first time a shape is used, a product of random inputs is compared
with `F.linear`'s, and a shape whose floats differ keeps `F.linear` (`exact`). So packing
changes no number anywhere, only time: on an Intel Xeon, a SmolLM2-135M decode step's
layers took 90 ms instead of 120 and its head 28 instead of 37 (benchmarks/RESULTS.md).

The packed copy is allocated at three to nine times the weight's floats, of which MKL
writes about the weight's; the decode loop packs after its prefill and drops the copies
when it ends, their memory returned to the system rather than kept for reuse
(`rlvr.models.lean.heap`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from rlvr.models.lean.heap import returned_when_freed


def available() -> bool:
    """Whether this torch has MKL's packed products (x86 builds do)."""
    mkl = getattr(torch.ops, "mkl", None)
    return bool(
        torch.backends.mkl.is_available()
        and mkl is not None
        and hasattr(mkl, "_mkl_linear")
        and hasattr(mkl, "_mkl_reorder_linear_weight")
    )


class PackedWeight:
    """A float32 (N, K) weight on a CPU with its MKL-packed copy for products with inputs
    of `rows` rows: `linear(x, bias)` is `F.linear(x, weight, bias)`, the same floats."""

    def __init__(self, weight: torch.Tensor, rows: int) -> None:
        self.weight = weight
        self.rows = rows
        with returned_when_freed():  # not a hole in the heap once freed (`heap`)
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] != self.rows:
            return F.linear(x, self.weight, bias)
        y = torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, bias, self.rows)
        return y.view(*x.shape[:-1], y.shape[-1])


def pack(weight: torch.Tensor, rows: int, bias: torch.Tensor | None = None):
    """`weight` packed for `rows`-row products (a `PackedWeight`), or `weight` itself where
    packing could change a float: not float32 on a CPU, a gradient to keep, no MKL, or a
    shape whose packed product differs from `F.linear`'s here (`exact`)."""
    eligible = (
        isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and weight.dtype == torch.float32
        and weight.device.type == "cpu"
        and not (torch.is_grad_enabled() and weight.requires_grad)
        and (bias is None or (bias.dtype == torch.float32 and bias.device.type == "cpu"))
        and available()
    )
    if not eligible or not exact(*weight.shape, rows, bias is not None):
        return weight
    return PackedWeight(weight.detach(), rows)


@functools.cache
def exact(out_features: int, in_features: int, rows: int, bias: bool) -> bool:
    """Whether MKL's packed product of this shape gives `F.linear`'s floats on this CPU,
    tried once per shape on random inputs (a different order of additions would change
    almost every float of the product)."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(out_features, in_features, generator=generator)
    x = torch.randn(rows, in_features, generator=generator)
    b = torch.randn(out_features, generator=generator) if bias else None
    with torch.no_grad(), returned_when_freed():
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
        got = torch.ops.mkl._mkl_linear(x, packed, w, b, rows)
        return torch.equal(got, F.linear(x, w, b))
