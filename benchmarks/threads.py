"""rlvr's GRPO step on a real model with 1 torch thread against the same step with more
(issue 40: "thread defaults measured on this machine"). One process, one model, the
thread count switched between steps (`torch.set_num_threads`), so the two settings step
in turn and load from other processes hits both alike. The work is `step_vs_trl.py`'s
(`--prompts` prompts × 8 samples × `--tokens` new tokens, β `--beta`, LoRA `--rank`, 0 a
full fine-tune); the first step of each setting is warm-up. Prints each step's phases,
then the medians and their ratio.

Run it on an otherwise idle machine: with other work on the cores, a second thread waits
for a core and the comparison says nothing about the default.

Run: python benchmarks/threads.py --model smollm2-135m [--tokens 24] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import step_vs_trl_work as work
import torch
from step_vs_trl_sides import RlvrSide
from step_vs_trl_work import Work, build_work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a path, an alias, 3m or 30m")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (0: full fine-tune)")
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}", help="comma list")
    parser.add_argument("--steps", type=int, default=4, help="per setting, the first not counted")
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")]
    if any(n < 1 for n in counts) or len(set(counts)) != len(counts):
        raise SystemExit(f"--threads={args.threads!r}: distinct counts of at least 1")
    warnings.filterwarnings("ignore")
    tiny = args.model in work.SIZES  # 3m, 30m: the benchmark's own models, for a quick look
    work.WORK = Work(None if tiny else args.model, args.prompts, args.rank, args.beta)
    hf_tok, model = build_work(args.model)
    side = RlvrSide(model, hf_tok, "grpo", args.tokens, 8)
    times: dict[int, list[float]] = {n: [] for n in counts}
    for step in range(args.steps):
        for n in counts:
            torch.set_num_threads(n)
            phases = side.step()
            times[n].append(phases["step"])
            shown = " ".join(f"{k} {v:.2f}" for k, v in phases.items() if isinstance(v, float))
            print(f"step {step} threads {n}: {shown}", flush=True)
    medians = {n: statistics.median(steps[1:]) for n, steps in times.items()}
    for n, median in medians.items():
        print(f"threads {n}: median {median:.2f} s/step, {medians[counts[0]] / median:.2f}x")


if __name__ == "__main__":
    main()
