"""Where a SmolLM2-135M GRPO step's resident memory peaks: rlvr's side of
`step_vs_trl.py` (4 prompts × 8, β 0.04, fp32, one thread) run for a few steps in one
process, the resident set sampled every 10 ms and each phase's peak printed per step
(generation, the π_ref forward after it, the update, the optimizer step).

Run: OMP_NUM_THREADS=1 python benchmarks/step_memory.py --tokens 24 --lora 0 [--unpacked]
(`--unpacked`: the decode loop's weights not packed for MKL, `rlvr/models/lean/packed.py`;
`--unreleased`: packed without first handing the kept heap's free pages back,
`rlvr.models.lean.heap.release_kept`, as before it). Each step also prints its minor page
faults and, under glibc, the heap's size and what of it is in use after the step.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import threading
import time

import step_vs_trl_sides as sides
import step_vs_trl_work as work
import torch

import rlvr.train.update as rlvr_update
from rlvr.rollout import static_decode


def resident_gib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def minor_faults() -> int:
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


def heap_gib() -> str:
    """glibc's heap after a step (`mallinfo2`: its arenas' size, the bytes in use)."""

    class Info(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip

    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return "heap: no mallinfo2"
    mallinfo2.restype = Info
    info = mallinfo2()
    return f"heap {info.arena / 2**30:.2f} GiB, {info.uordblks / 2**30:.2f} in use"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--lora", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--unpacked", action="store_true")
    parser.add_argument("--unreleased", action="store_true")
    args = parser.parse_args()
    if args.unpacked:
        static_decode.PACK_STEPS = 10**9
    if args.unreleased:
        static_decode.release_kept = lambda: False
    work.WORK = dataclasses.replace(
        work.WORK, model=args.model, prompts=4, beta=0.04, lora=args.lora
    )
    phase, peaks = ["load"], {}

    def probe() -> None:
        while True:
            peaks[phase[0]] = max(peaks.get(phase[0], 0.0), resident_gib())
            time.sleep(0.01)

    threading.Thread(target=probe, daemon=True).start()
    torch.manual_seed(0)
    hf_tok, model = work.build_work("")
    side = sides.RlvrSide(model, hf_tok, "grpo", args.tokens, 8)

    def entering(name: str, fn, after: str):
        def wrapped(*a, **k):
            phase[0] = name
            try:
                return fn(*a, **k)
            finally:
                phase[0] = after

        return wrapped

    side.engine.generate_ids = entering("generation", side.engine.generate_ids, "ref")
    sides.policy_update = entering("update", sides.policy_update, "after")
    rlvr_update._clip_and_step = entering("optimizer", rlvr_update._clip_and_step, "update")
    for step in range(args.steps):
        peaks.clear()
        faults = minor_faults()
        seconds = side.step()["step"]
        faults = minor_faults() - faults
        shown = ", ".join(f"{k} {v:.2f}" for k, v in peaks.items())
        print(
            f"step {step + 1}: {seconds:.1f} s; peak resident GiB by phase: {shown}; "
            f"{faults} minor page faults; {heap_gib()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
