"""rlvr's decode loop on a real model, three ways side by side in one process, rollout by
rollout: as shipped; with its weights not packed for MKL (`rlvr/models/lean/packed.py`);
and drawing each token with `torch.multinomial` instead of `rlvr/rollout/draw.py`. All
three must give the same tokens and log-probs (checked), so the times compare the same
work: the work of `step_vs_trl.py`'s generation phase (4 prompts × 8 rows × `--tokens`
new tokens, EOS unreachable, temperature 1, fp32, one thread).

Run: OMP_NUM_THREADS=1 python benchmarks/bench_decode.py --model smollm2-135m --tokens 64 --reps 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import step_vs_trl_work as work
import torch

from rlvr.rollout import HFEngine, SamplingParams, hf_engine, static_decode
from rlvr.train.allocation import keep_freed_pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    work.WORK = dataclasses.replace(work.WORK, model=args.model, prompts=args.prompts)
    hf_tok, model = work.build_work("")
    keep_freed_pages()  # as the trainer on a CPU
    engine = HFEngine(model.eval(), work.NoEosTokenizer(hf_tok))
    prompt_ids = [engine.tokenizer.encode(p) for p in work.prompts()]  # each drawn `group` times
    params = SamplingParams(args.group, 1.0, 1.0, args.tokens)
    shipped = (static_decode.PACK_STEPS, hf_engine.multinomial_one)
    variants = {
        "rlvr": shipped,
        "unpacked": (10**9, shipped[1]),
        "torch draw": (shipped[0], _torch_draw),
    }

    def rollout(name: str):
        static_decode.PACK_STEPS, hf_engine.multinomial_one = variants[name]
        start = time.perf_counter()
        gen = engine.generate_ids(prompt_ids, params, torch.Generator().manual_seed(0))
        return time.perf_counter() - start, gen

    rollout("rlvr")  # warm-up
    times = {name: [] for name in variants}
    for _ in range(args.reps):
        reference = None
        for name in variants:
            seconds, gen = rollout(name)
            times[name].append(seconds)
            got = (gen.response_ids, gen.sampler_logprobs)
            if reference is None:
                reference = got
            elif not all(torch.equal(a, b) for a, b in zip(reference, got, strict=True)):
                raise SystemExit(f"{name} drew other tokens or log-probs than rlvr's decode")
    static_decode.PACK_STEPS, hf_engine.multinomial_one = shipped
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"ratio-unpacked {median['unpacked'] / median['rlvr']:.2f}")
    print(f"ratio-torch-draw {median['torch draw'] / median['rlvr']:.2f}")
    for name, t in times.items():
        print(f"{name:11s} {median[name]:7.2f} s/rollout (min {min(t):.2f}, max {max(t):.2f})")
    print(
        f"# threads={torch.get_num_threads()} torch {torch.__version__}; {args.prompts} prompts x "
        f"{args.group} x {args.tokens} tokens, fp32; {args.reps} rollouts each after a warm-up, "
        f"alternating; the same tokens and log-probs in all (checked)"
    )


def _torch_draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=generator)


if __name__ == "__main__":
    main()
