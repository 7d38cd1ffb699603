"""The matrix-multiply FLOP counter behind `benchmarks/step_vs_trl.py`'s floor line."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from step_vs_trl import MatmulFlops


def test_counts_two_mkn_per_product():
    with MatmulFlops() as counter:
        torch.randn(3, 4) @ torch.randn(4, 5)  # 2·3·4·5 = 120
        torch.addmm(torch.zeros(5), torch.randn(3, 4), torch.randn(4, 5))  # 120, bias free
        torch.randn(2, 3, 4) @ torch.randn(2, 4, 5)  # 2 · 120 = 240
        torch.randn(3, 4) * torch.randn(3, 4)  # not a matrix product: 0
    assert counter.flops == 480


def test_linear_backward_counts_both_gradients():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    with MatmulFlops() as counter:
        F.linear(x, w).sum().backward()
    # forward (3×4)(4×5), grad_x (3×5)(5×4), grad_w (5×3)(3×4): 120 FLOPs each
    assert counter.flops == 360
