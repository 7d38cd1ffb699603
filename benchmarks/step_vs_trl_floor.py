"""The `floor:` line of `step_vs_trl.py` (skipped with `--no-floor`): what bounds rlvr's
step from below. The matrix-multiply FLOPs of one step (forward and backward, counted op
by op), the seconds they would take at this machine's best fp32 GEMM rate (a 1024³
product, measured then), the share of a profiled rlvr step spent inside matrix
multiplies, and the share that the step's own products take when replayed alone, in the
same order on the same memory (`replay`); each share applied to rlvr's median step."""

from __future__ import annotations

import bisect
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from step_vs_trl_fp32 import CONTESTANTS
from step_vs_trl_sides import RlvrSide
from step_vs_trl_work import build_work
from torch.utils._python_dispatch import TorchDispatchMode

MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm")  # aten ops, as dispatched and profiled


class MatmulTrace(TorchDispatchMode):
    """Records every matrix multiply dispatched (forward and backward), in order: the op,
    each operand's address, shape and strides, the keyword arguments; and counts
    2·m·k·n FLOPs per product."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMUL_OPS:
            a, b = args[-2:] if name in ("addmm", "baddbmm") else args[:2]
            self.flops += 2 * a.numel() * b.shape[-1]  # (…, m, k) @ (…, k, n)
            operands = [_Operand.of(x) if isinstance(x, torch.Tensor) else x for x in args]
            named = {
                k: _Operand.of(x) if isinstance(x, torch.Tensor) else x
                for k, x in (kwargs or {}).items()
            }  # e.g. `out=` of compiled code
            self.calls.append((func, operands, named))
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class _Operand:
    address: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> _Operand:
        return cls(t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)

    def extent(self) -> int:
        """Elements from the first to the last one the operand reaches (0 if empty)."""
        if 0 in self.shape:
            return 0
        return 1 + sum((n - 1) * step for n, step in zip(self.shape, self.stride, strict=True))

    def nbytes(self) -> int:
        return self.extent() * self.dtype.itemsize


ALIGN = 64  # bytes, a cache line: each replayed operand keeps its address modulo ALIGN


def replay(calls: list[tuple]):
    """A function that runs the recorded products again, alone and in their order, on
    memory laid out as the step's was: the byte ranges the operands reached are merged
    where they overlap, each merged range gets one buffer, and every operand sits in its
    range's buffer at the offset it had (and at the same place in a cache line). So
    products that read the same tensor (a weight) read the same memory again, views into
    one tensor (a chunk of a buffer, a slice of a weight) stay views into one buffer, and
    activations reuse memory the way the allocator reused it: the caches see the step's
    memory, less everything between the products. The memory taken is what the step's
    products reached, once."""
    operands = [
        x
        for _, args, named in calls
        for x in (*args, *named.values())
        if isinstance(x, _Operand) and x.extent()
    ]
    ranges: list[list[int]] = []  # merged [first byte, end)
    for first, end in sorted({(x.address, x.address + x.nbytes()) for x in operands}):
        if ranges and first <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], end)
        else:
            ranges.append([first, end])
    firsts = [first for first, _ in ranges]
    memory = [_random_bytes(first, end - first) for first, end in ranges]

    def materialize(x):
        if not isinstance(x, _Operand):
            return x
        if not x.extent():
            return torch.empty(x.shape, dtype=x.dtype)
        i = bisect.bisect_right(firsts, x.address) - 1
        offset = x.address - firsts[i]
        return memory[i][offset : offset + x.nbytes()].view(x.dtype).as_strided(x.shape, x.stride)

    for x in operands:  # values of the operand's own type, not float32's bits read as it
        if x.dtype.is_floating_point and x.dtype != torch.float32:
            materialize(_Operand(x.address, (x.extent(),), (1,), x.dtype)).normal_()
    ready = [
        (func, [materialize(x) for x in args], {k: materialize(x) for k, x in named.items()})
        for func, args, named in calls
    ]

    def run() -> None:
        for func, args, kwargs in ready:
            func(*args, **kwargs)

    return run


def _random_bytes(address: int, size: int) -> torch.Tensor:
    """`size` bytes of float32 normal values, starting at the same place in a cache line as
    `address` (float32 operands read them as such)."""
    total = size + ALIGN
    raw = torch.randn((total + 3) // 4).view(torch.uint8)
    shift = (address - raw.data_ptr()) % ALIGN
    return raw[shift : shift + size]


def best_gemm_rate(size: int = 1024, reps: int = 10) -> float:
    """FLOP/s of this machine's fastest fp32 matrix multiply that we know of: a square
    `size`³ product, best of `reps`, with the current torch thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def floor(size, loss, tokens, group, rounds: int = 5) -> dict[str, float]:
    """What bounds rlvr's step from below, measured in this process on a fresh rlvr side:
    the matrix-multiply FLOPs of one step (forward and backward, recorded by
    `MatmulTrace`) and the seconds those take at the best fp32 GEMM rate measured now;
    the share of a profiled step spent inside matrix multiplies; and the share of the
    step, of its generation and of the rest that the step's own products take when
    `replay`ed alone, in order, with their FLOP/s so (sums over `rounds`, each round a
    real step then the replays, so that drift hits both alike)."""
    from torch.profiler import ProfilerActivity, profile

    hf_tok, model = build_work(size)  # the tiny model of `size`, or `--model`'s
    side = RlvrSide(model, hf_tok, loss, tokens, group)
    for _ in range(2):
        side.step()
    generate, ends = side.engine.generate_ids, []

    def marked(*args, **kwargs):  # where the generation's products end in the trace
        out = generate(*args, **kwargs)
        ends.append((len(trace.calls), trace.flops))
        return out

    side.engine.generate_ids = marked
    with MatmulTrace() as trace:
        side.step()
    side.engine.generate_ids = generate
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = side.step()["step"]
    in_matmul = sum(
        e.self_cpu_time_total
        for e in prof.key_averages()
        if e.key.removeprefix("aten::") in MATMUL_OPS
    )
    (cut, gen_flops), *_ = ends
    parts = {"generation": replay(trace.calls[:cut]), "rest": replay(trace.calls[cut:])}
    alone, real = defaultdict(float), defaultdict(float)  # summed over counted rounds
    for counted in [False] + [True] * rounds:  # a warm-up round first
        times = side.step()
        times["rest"] = times["step"] - times["generation"]
        for part, products in parts.items():
            start = time.perf_counter()
            products()
            alone[part] += counted * (time.perf_counter() - start)
            real[part] += counted * times[part]
    real["step"], alone["step"] = sum(real.values()), sum(alone.values())
    rate = best_gemm_rate()
    # Shares, not seconds: the alternating run's step times and these were measured at
    # different moments, and the machine's speed drifts. The profiler slows small ops
    # more than matrix multiplies, so its share errs low and its ceiling below errs high.
    return {
        "flops": trace.flops,
        "products": len(trace.calls),
        "rate": rate,
        "ideal_s": trace.flops / rate,
        "share": in_matmul / 1e6 / wall,
        **{f"alone_{part}": alone[part] / real[part] for part in real},
        # FLOP/s of the products replayed in order
        "rate_generation": gen_flops * rounds / alone["generation"],
        "rate_rest": (trace.flops - gen_flops) * rounds / alone["rest"],
    }


def report_floor(bound: dict[str, float], results) -> None:
    """The `floor:` line: `bound` (from `floor`) applied to the fp32 contestants' medians.
    TRL's step over rlvr's replayed products is a ratio that no cut of rlvr's other work
    can beat: only faster or fewer matrix multiplies can."""
    step = {name: statistics.median(t["step"] for t in results[name]) for name in CONTESTANTS}
    in_matmul = step["rlvr"] * bound["share"]
    alone = step["rlvr"] * bound["alone_step"]
    print(
        f"floor: rlvr's step multiplies {bound['flops'] / 1e9:.1f} GFLOP of matrices "
        f"({bound['products']} products); at {bound['rate'] / 1e9:.0f} GFLOP/s (this machine's "
        f"best fp32 GEMM, 1024^3, now) that is {bound['ideal_s']:.3f} s. A profiled rlvr step "
        f"spends {bound['share']:.0%} of its time inside matrix multiplies: {in_matmul:.3f} s of "
        f"the median step above; TRL-default / that: {step['trl'] / in_matmul:.2f}x, "
        f"TRL-no-checkpointing / that: {step['trl_nogc'] / in_matmul:.2f}x. The same products "
        f"replayed alone, in order, take {bound['alone_step']:.0%} of a step's time "
        f"({bound['alone_generation']:.0%} of the generation's, {bound['alone_rest']:.0%} of "
        f"the rest's), at {bound['rate_generation'] / 1e9:.0f} GFLOP/s in the generation and "
        f"{bound['rate_rest'] / 1e9:.0f} GFLOP/s in the rest: "
        f"{alone:.3f} s; TRL-default / that: {step['trl'] / alone:.2f}x, "
        f"TRL-no-checkpointing / that: {step['trl_nogc'] / alone:.2f}x: ratios that no cut "
        "of rlvr's other work can beat without faster (or fewer) matrix multiplies"
    )
    sys.stdout.flush()
