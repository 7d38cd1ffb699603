"""One RL training step, rlvr against TRL's GRPOTrainer, on the same work, side by side.

Both sides get the same freshly initialised Qwen2-style model (seed 0; fp32, character
vocabulary of 50), the same 8 prompts × group 8, exactly `--tokens` new tokens per row
(TRL: `min_new_tokens` suppresses EOS; rlvr: the benchmark tokenizer's EOS id is one the
model cannot emit), temperature 1, top-p 1, no top-k, no reference model (β = 0), one
optimizer step per rollout batch (on-policy), the same reward function and AdamW settings.
Three contestants (five with bf16, below) are run in turn, step by step, so that load
from other processes hits them alike: TRL with its defaults (gradient checkpointing on), TRL without gradient
checkpointing, and rlvr. Each runs in a process of its own (built from the same seed, the
driver checks the weights' digest and the torch thread count), and the driver asks each in
turn for one step over a pipe and waits for its phase times: sharing one process slowed
the contestants unequally (allocator, OpenMP pools per thread, caches). `--in-process`
keeps the old harness (one process, TRL trainers in threads) to compare against. Every
contestant's first steps are warm-up and not counted.

The first result line is `ratio X.XX`: TRL-default s/step / rlvr s/step for the first size
and loss (by default the 3 M model with grpo). Two more contestants run unless `--no-bf16`:
TRL's defaults with `bf16=True`, and rlvr with `precision: bf16` (autocast over float32
master weights) and `sampler_precision: bf16` (sampling from a bf16 copy synced after the
update); the next lines are `ratio-bf16 X.XX` (TRL-bf16 / rlvr-bf16: same precision, same
work) and `speedup-bf16 X.XX` (TRL's fp32 defaults / rlvr-bf16: what a user gains). Then per setting: the median and spread
(min–max) of each contestant's step time, the ratios, and the medians of the time spent
in generation / log-prob forwards / backward / optimizer (grad clipping included) and in
the rest (rewards, advantages, bookkeeping); medians of parts need not add up exactly.
A line gives each contestant's median CPU seconds per step (its process's CPU time
over all threads; with one thread it moves less with load from other processes than
wall time does; with `--in-process` it is the shared process's).

The `floor:` line (skip with `--no-floor`) says what bounds rlvr's step from below: the
matrix-multiply FLOPs of one step (forward and backward, counted op by op), the seconds
they would take at this machine's best fp32 GEMM rate (a 1024³ product, measured then),
the share of a profiled rlvr step spent inside matrix multiplies, and the share that the
step's own products take when replayed alone, in the same order on the same memory
(`replay`); each share applied to rlvr's median step. TRL's step time over the replayed
products is a ratio that no cut of rlvr's other work can beat: only faster or fewer
matrix multiplies can.

rlvr's step is the body of `Trainer.train_step` (generate → rewards → `prepare_batch` →
`policy_update`) without the task registry and prompt pool. TRL runs offline: the
tokenizer is built locally, `report_to="none"`, nothing is saved.

A real model (`--model PATH|FILE.gguf|ALIAS`, e.g. smollm2-135m) replaces the tiny
ones: both sides load it in fp32 with its own tokenizer, on the first `--prompts` prompts,
with `--lora R` (peft LoRA of rank R, α = 2R, on every linear layer, adapters drawn from one
seed on both sides; 0 = full fine-tune) and `--beta` (KL to π_ref: TRL keeps a reference
model, or disables the adapter under LoRA; rlvr a frozen copy, or the adapter-disabled view).
The fp32 comparison only (no bf16; the floor line only with `--floor`). Each contestant's
peak RSS is printed.

`--service` adds the lab-facing contestant (step_vs_trl_service_side.py): the same GRPO
step through rlvr.service's primitives, as a lab script writes it (sampler sync, `sample`
per prompt, group-normalised advantages client-side, `forward_backward` with
`importance_sampling`, `optim_step`); its lines are `ratio-service X.XX` (TRL-default /
service), rlvr loop / service, and the service's phases. It needs `--beta 0`.

Needs the `bench` extra (`pip install -e .[bench]`); rlvr itself never imports TRL.
Run: python benchmarks/step_vs_trl.py [--sizes 3m,30m] [--losses grpo,dapo] [--reps 8]
     [--in-process] [--no-floor] [--compile] [--no-bf16] [--service]
     python benchmarks/step_vs_trl.py --model smollm2-135m --prompts 4 --tokens 24 \
       --beta 0.04 --lora 16 --losses grpo --reps 3 --warmup 1 [--floor]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import warnings

import step_vs_trl_work as work
import torch
from step_vs_trl_bf16 import BF16
from step_vs_trl_floor import floor, report_floor
from step_vs_trl_fp32 import FP32
from step_vs_trl_in_process import run_setting_in_process
from step_vs_trl_runner import child, report, run_setting
from step_vs_trl_service import SERVICE
from step_vs_trl_sides import RlvrSide
from step_vs_trl_work import SIZES, Work, prompts

# The parts, one file each: step_vs_trl_work (the same work for both sides, the phase
# clock), step_vs_trl_sides (rlvr's step, TRL's trainer), step_vs_trl_runner (a process
# per contestant, the report of a setting); the comparisons step_vs_trl_fp32,
# step_vs_trl_bf16 and step_vs_trl_floor; step_vs_trl_in_process (--in-process).
COMPARISONS = (FP32, BF16)  # in the order their contestants step within a round


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="3m", help=f"comma list of {sorted(SIZES)}")
    parser.add_argument("--losses", default="grpo,dapo", help="comma list: grpo, dapo")
    parser.add_argument("--reps", type=int, default=8, help="counted steps per contestant")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted first steps")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per completion")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the old harness: all contestants in one process, TRL in threads (to compare)",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the matrix-multiply floor of each setting"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="rlvr samples with its decode step compiled (engine_options.compile); the "
        "compilation happens in the warm-up steps",
    )
    parser.add_argument(
        "--no-bf16",
        action="store_true",
        help="skip the bf16 contestants (TRL bf16=True, rlvr precision/sampler_precision bf16)",
    )
    parser.add_argument(
        "--model",
        help="a real model instead of the tiny ones: directory, GGUF file or alias "
        "(rlvr's --model); implies --no-bf16, and --no-floor unless --floor",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="with --model: add the floor: line (about ten more steps and their products "
        "replayed: some 10 minutes on SmolLM2-135M at 64 tokens)",
    )
    parser.add_argument("--prompts", type=int, default=8, help="how many of the 8 prompts")
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tune)")
    parser.add_argument("--beta", type=float, default=0.0, help="KL weight to π_ref")
    parser.add_argument(
        "--memory-budget",
        type=float,
        default=Work.memory_budget,
        help="rlvr's memory_budget_gib (its default; 0: every row in one micro-batch)",
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="add the GRPO step through rlvr.service's primitives (needs --beta 0)",
    )
    names = tuple(name for c in (*COMPARISONS, SERVICE) for name in c.contestants)
    parser.add_argument("--child", choices=names, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not 1 <= args.prompts <= 8 or args.lora < 0 or args.beta < 0 or args.memory_budget < 0:
        raise SystemExit(
            f"--prompts must be 1..8 (got {args.prompts}), --lora ≥ 0 (got {args.lora}), "
            f"--beta ≥ 0 (got {args.beta}), --memory-budget ≥ 0 (got {args.memory_budget})"
        )
    if args.service and (args.in_process or args.beta):
        raise SystemExit("--service runs in its own process with --beta 0 (no KL in its losses)")
    if args.model and args.in_process:
        raise SystemExit("--model runs each contestant in its own process; drop --in-process")
    if args.model:
        args.sizes, args.no_bf16, args.no_floor = args.model, True, not args.floor
    elif args.floor:
        raise SystemExit("--floor is for --model (the tiny models' floor runs unless --no-floor)")
    work.WORK = Work(args.model, args.prompts, args.lora, args.beta, args.memory_budget)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    RlvrSide.compile_decode = args.compile
    if args.child:  # one contestant, driven through stdin/stdout
        steps = args.warmup + args.reps
        child(args.child, args.sizes, args.losses, args.tokens, args.group, steps, args.threads)
        return
    threads = torch.get_num_threads()
    comparisons = [FP32] if args.no_bf16 or args.in_process else list(COMPARISONS)
    comparisons += [SERVICE] if args.service else []
    where = (
        "all in one process (TRL in threads)"
        if args.in_process
        else "each contestant in its own process (same thread count, checked)"
    )
    header = (
        f"# threads={threads} torch {torch.__version__}; "
        f"{len(prompts())} prompts x {args.group} x {args.tokens} tokens, fp32 (and bf16: "
        f"{'none' if args.no_bf16 or args.in_process else ', '.join(BF16.contestants)}), "
        f"beta={args.beta}, {f'LoRA r{args.lora}' if args.lora else 'full fine-tune'}; "
        f"{args.warmup} warm-up + {args.reps} counted steps each, alternating; {where}"
        + ("; rlvr's decode step compiled" if args.compile else "")
    )
    first = True
    for size in args.sizes.split(","):
        for loss in args.losses.split(","):
            setting = (size, loss, args.reps, args.warmup, args.tokens, args.group)
            if args.in_process:
                with contextlib.redirect_stdout(io.StringIO()):  # TRL's end-of-train dicts
                    params, results = run_setting_in_process(*setting)
            else:
                names = tuple(name for c in comparisons for name in c.contestants)
                params, results = run_setting(*setting, threads, names)
            report(size, loss, params, results, first, comparisons)
            if not args.no_floor:
                report_floor(floor(size, loss, args.tokens, args.group), results)
            if first:
                print(header)
            first = False


if __name__ == "__main__":
    main()
