"""Where a SmolLM2-135M GRPO step's resident memory peaks: rlvr's side of
`step_vs_trl.py` (4 prompts × 8, β 0.04, fp32, one thread) run for a few steps in one
process, the resident set sampled every 10 ms and each phase's peak printed per step
(generation, the π_ref forward after it, the update, the optimizer step).

Run: OMP_NUM_THREADS=1 python benchmarks/step_memory.py --tokens 24 --lora 0 [--unpacked]
(`--unpacked`: the decode loop's weights not packed for MKL, `rlvr/models/lean/packed.py`)
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--lora", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--unpacked", action="store_true")
    args = parser.parse_args()
    if args.unpacked:
        static_decode.PACK_STEPS = 10**9
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
        seconds = side.step()["step"]
        shown = ", ".join(f"{k} {v:.2f}" for k, v in peaks.items())
        print(f"step {step + 1}: {seconds:.1f} s; peak resident GiB by phase: {shown}", flush=True)


if __name__ == "__main__":
    main()
