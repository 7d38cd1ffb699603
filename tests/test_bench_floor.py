"""The matrix-multiply trace behind `benchmarks/step_vs_trl.py`'s floor line
(`benchmarks/step_vs_trl_floor.py`)."""

import sys
from pathlib import Path

import pytest
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


def test_floor_of_a_tiny_step_counts_its_products_and_times_their_replay():
    """`floor` on the 3 M model (the work `build_work` gives without `--model`): the step's
    products are counted, some of the profiled step is inside them, and replayed alone they
    take a positive share of the step."""
    from step_vs_trl_floor import floor

    bound = floor("3m", "grpo", tokens=4, group=2, rounds=1)
    assert bound["flops"] > 0 and bound["products"] > 0
    assert 0 < bound["share"] <= 1
    assert bound["alone_step"] > 0 and bound["rate_rest"] > 0
    assert bound["ideal_s"] == bound["flops"] / bound["rate"]


def test_the_floor_flag_is_for_a_real_model(monkeypatch):
    """`--floor` asks for the floor line of `--model`'s run; without `--model` it is an
    error (the tiny models' floor runs unless `--no-floor`), not ignored."""
    import step_vs_trl

    monkeypatch.setattr(sys, "argv", ["step_vs_trl.py", "--floor"])
    with pytest.raises(SystemExit, match="--floor is for --model"):
        step_vs_trl.main()


def test_replay_keeps_views_in_one_buffer_at_their_offsets():
    """A tensor and a view into it (a chunk of rows) are replayed on one buffer, the view
    at the same byte offset from the tensor and each at the same place in a cache line as
    in the step, so the products reach the memory the step's reached."""
    base, w = torch.randn(8, 4), torch.randn(5, 4)
    chunk = base[3:]  # 48 bytes into `base`
    with MatmulTrace() as trace:
        base @ w.t()
        chunk @ w.t()
    run = replay(trace.calls)
    with MatmulTrace() as again:
        run()
    (_, (b, w1), _), (_, (c, w2), _) = again.calls
    assert c.address - b.address == chunk.data_ptr() - base.data_ptr() == 48
    assert b.address % 64 == base.data_ptr() % 64 and w1.address % 64 == w.data_ptr() % 64
    assert w1.address == w2.address
