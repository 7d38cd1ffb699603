"""rlvr's GRPO step on a real model with LoRA against the same step as a full fine-tune,
in one process, stepping in turn so that load from other processes hits both alike
(issue 40's goal: LoRA never slower than the full fine-tune). The work is
`step_vs_trl.py`'s (`--prompts` prompts × 8 samples × `--tokens` new tokens, β `--beta`);
the first step of each is warm-up. Prints each step's phases, then the medians.

Run: OMP_NUM_THREADS=1 python benchmarks/lora_vs_full.py --model smollm2-135m [--tokens 24]
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import step_vs_trl_work as work
import torch
from step_vs_trl_sides import RlvrSide
from step_vs_trl_work import Work, build_work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4, help="per side, the first not counted")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    sides, times = {}, {}
    for rank in (args.rank, 0):
        work.WORK = Work(args.model, args.prompts, rank, args.beta)
        hf_tok, model = build_work(args.model)
        sides[rank] = RlvrSide(model, hf_tok, "grpo", args.tokens, 8)
        times[rank] = []
    for step in range(args.steps):
        for rank, side in sides.items():
            work.WORK = Work(args.model, args.prompts, rank, args.beta)
            phases = side.step()
            times[rank].append(phases["step"])
            name = f"LoRA r{rank}" if rank else "full"
            shown = " ".join(f"{k} {v:.2f}" for k, v in phases.items() if isinstance(v, float))
            print(f"step {step} {name}: {shown}", flush=True)
    for rank, steps in times.items():
        name = f"LoRA r{rank}" if rank else "full"
        print(f"{name}: median {statistics.median(steps[1:]):.2f} s/step")


if __name__ == "__main__":
    main()
