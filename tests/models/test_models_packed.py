"""Weights packed once for MKL's products (rlvr/models/lean/packed.py) give `F.linear`'s
floats bit for bit, fall back to it where packing could change a float, and leave the
decode loop's tokens and log-probs exactly as they were (tests/rollout)."""

import pytest
import torch
import torch.nn.functional as F

from rlvr.models.lean import head_product, packed
from rlvr.models.lean.packed import PackedWeight, pack

needs_mkl = pytest.mark.skipif(not packed.available(), reason="this torch has no MKL")


def _data(seed: int, rows: int, n: int, k: int):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(rows, k, generator=g),
        torch.randn(n, k, generator=g),
        torch.randn(n, generator=g),
    )


@needs_mkl
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_product_is_f_linear_bit_for_bit(bias):
    """32 rows (a decode step's) by a (3,072, 576) weight, SmolLM2's gate/up: equal to
    F.linear; a (2, 16, 576) input of 32 rows in all too, and other row counts go to
    F.linear itself."""
    x, w, b = _data(0, 32, 3072, 576)
    b = b if bias else None
    weight = pack(w, 32, b)
    assert isinstance(weight, PackedWeight)
    assert torch.equal(weight.linear(x, b), F.linear(x, w, b))
    assert torch.equal(weight.linear(x.view(2, 16, 576), b), F.linear(x, w, b).view(2, 16, 3072))
    assert torch.equal(weight.linear(x[:5], b), F.linear(x[:5], w, b))


def test_what_could_change_a_float_is_not_packed(monkeypatch):
    """bfloat16, a weight that trains, and a shape whose packed product differs from
    F.linear's on this CPU (`exact` says so) are returned as they are."""
    _, w, _ = _data(1, 8, 64, 32)
    assert pack(w.bfloat16(), 8) is not None and not isinstance(pack(w.bfloat16(), 8), PackedWeight)
    trained = w.clone().requires_grad_()
    assert pack(trained, 8) is trained
    monkeypatch.setattr(packed, "exact", lambda *shape: False)
    assert pack(w, 8) is w


@needs_mkl
def test_exact_compares_with_f_linear(monkeypatch):
    """`exact` is True here for the decode's shapes, and False once the packed product is
    made to differ from F.linear's by one float."""
    packed.exact.cache_clear()
    assert packed.exact(960, 576, 32, False)
    real = torch.ops.mkl._mkl_linear

    class Ops:
        _mkl_reorder_linear_weight = staticmethod(torch.ops.mkl._mkl_reorder_linear_weight)

        @staticmethod
        def _mkl_linear(*args):
            y = real(*args)
            y[0, 0] = torch.nextafter(y[0, 0], torch.tensor(float("inf")))
            return y

    monkeypatch.setattr(torch.ops, "mkl", Ops)
    packed.exact.cache_clear()
    try:
        assert not packed.exact(960, 576, 32, False)
    finally:
        packed.exact.cache_clear()


@needs_mkl
def test_the_packed_head_is_head_logits_bit_for_bit():
    """The head's slices packed one by one: the logits `head_logits` writes, with a bias
    and without; None when a slice cannot be packed."""
    h, w, b = _data(2, 32, 3 * 1024 + 200, 64)
    for bias in (None, b):
        want = head_product.head_logits(h, w, bias, h.new_empty(32, w.shape[0]))
        logits = head_product.packed_head(w, bias, 32)
        assert torch.equal(logits(h), want)
    assert head_product.packed_head(w.bfloat16(), None, 32) is None
