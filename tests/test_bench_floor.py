"""The matrix-multiply trace behind `benchmarks/step_vs_trl.py`'s floor line
(`benchmarks/step_vs_trl_floor.py`)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from step_vs_trl_floor import MatmulTrace, replay


def test_counts_two_mkn_per_product():
    with MatmulTrace() as trace:
        torch.randn(3, 4) @ torch.randn(4, 5)  # 2·3·4·5 = 120
        torch.addmm(torch.zeros(5), torch.randn(3, 4), torch.randn(4, 5))  # 120, bias free
        torch.randn(2, 3, 4) @ torch.randn(2, 4, 5)  # 2 · 120 = 240
        torch.randn(3, 4) * torch.randn(3, 4)  # not a matrix product: 0
    assert trace.flops == 480
    assert [func.overloadpacket.__name__ for func, _, _ in trace.calls] == ["mm", "addmm", "bmm"]


def test_linear_backward_counts_both_gradients():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    with MatmulTrace() as trace:
        F.linear(x, w).sum().backward()
    # forward (3×4)(4×5), grad_x (3×5)(5×4), grad_w (5×3)(3×4): 120 FLOPs each
    assert trace.flops == 360
    assert len(trace.calls) == 3


def test_replay_runs_the_same_products_in_order_on_shared_buffers():
    w, x1, x2 = torch.randn(5, 4), torch.randn(3, 4), torch.randn(2, 4)
    with MatmulTrace() as trace:
        a = x1 @ w.t()  # w read through a transposed view
        x2 @ w.t()  # w again
        torch.addmm(torch.zeros(3), torch.randn(6, 5), a.t(), beta=0.5)
    run = replay(trace.calls)
    with MatmulTrace() as again:
        run()
    assert again.flops == trace.flops
    shapes = lambda t: [  # noqa: E731
        (f, [(x.shape, x.stride) for x in ops if hasattr(x, "shape")], kw) for f, ops, kw in t.calls
    ]
    assert shapes(again) == shapes(trace)  # same ops, shapes, strides, keyword arguments
    assert again.calls[2][2] == {"beta": 0.5}
    # the two reads of w hit one replay buffer; x1 and x2, both alive, have their own
    (_, (x1_, w1), _), (_, (x2_, w2), _) = again.calls[:2]
    assert w1.address == w2.address
    assert x1_.address != x2_.address
