"""Rollout throughput: rlvr's HFEngine against transformers' `generate`, side by side.

Same warm-started embedded policy, same prompts (16 × group 8), same budget (14 new
tokens), temperature 1. `generate` is asked for what RL needs: the sampled tokens *and*
their log-probs (`output_scores`), as TRL's CPU path does. Prints seconds per batch,
generated tokens per second (every row's tokens up to its EOS, counted from the
returned masks), the ratio, and the peak memory each side adds over the loaded model:
each side runs in its own fresh process and reports the growth of its peak resident set
(CPU) or `torch.cuda.max_memory_allocated` (GPU). With `--forced-length` EOS is never
sampled, so both sides generate exactly `--tokens` tokens per row.
With `--compile` rlvr's decode step runs through `torch.compile` (`engine_options:
{compile: true}`); the compilation happens in the warm-up call, whose seconds are printed.
Run: .venv/bin/python benchmarks/bench_rollout.py [--repeats 10] [--forced-length] [--compile]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import make_task
from rlvr.warmstart import load_policy


def _time(fn, repeats: int) -> tuple[float, int, float]:
    """Median seconds per call after one warm-up call, the tokens one call generated, and
    the warm-up call's seconds."""
    start = time.perf_counter()
    tokens = fn()  # warm-up
    warmup = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), tokens, warmup


def _peak_bytes() -> int:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def hf_generate(model, tokenizer, prompts, group, max_new_tokens, seed, forced=False):
    torch.manual_seed(seed)
    rows = [tokenizer.encode(p) for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
    mask = (
        torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in rows])[:, None]
    ).long()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            num_return_sequences=group,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            min_new_tokens=max_new_tokens if forced else 0,
        )
        scores = torch.stack(out.scores, 1).log_softmax(-1)  # (B, T, V)
        new = out.sequences[:, width:]
        scores.gather(-1, new[..., None]).squeeze(-1)
        # Tokens up to and including each row's first EOS.
        ended = (new == tokenizer.eos_token_id).long().cumsum(-1)
        return int(((ended == 0) | ((ended == 1) & (new == tokenizer.eos_token_id))).sum())


class _NoEos:
    """The tokenizer with an EOS id no token has: rows run the full budget."""

    def __init__(self, tokenizer) -> None:
        self.inner, self.eos_token_id = tokenizer, -1
        self.pad_token_id = tokenizer.pad_token_id

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_side(
    side: str, repeats: int, tokens: int, forced: bool, compile: bool = False
) -> dict[str, float]:
    """Time one side in this process; returns ms/batch, tokens/s and the peak memory
    added by generating (over the loaded model)."""
    model, tokenizer, _ = load_policy(
        "embedded", "arithmetic", {"digits": 2, "ops": "+"}, 0, progress=False
    )
    model.eval()
    prompts = [p.prompt for p in make_task("arithmetic").problems("eval")[:16]]
    before = _peak_bytes()
    if side == "rlvr":
        params = SamplingParams(group_size=8, temperature=1.0, max_new_tokens=tokens)
        engine = HFEngine(model, _NoEos(tokenizer) if forced else tokenizer, compile=compile)
        run = lambda: int(  # noqa: E731
            engine.generate(prompts, params, torch.Generator().manual_seed(0)).response_mask.sum()
        )
    else:
        run = lambda: hf_generate(model, tokenizer, prompts, 8, tokens, 0, forced)  # noqa: E731
    seconds, generated, warmup = _time(run, repeats)
    return {
        "ms": seconds * 1000,
        "warmup_s": warmup,
        "tokens": generated,
        "tokens_per_s": generated / seconds,
        "peak_mib": (_peak_bytes() - before) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=14, help="max new tokens per row")
    parser.add_argument("--forced-length", action="store_true", help="never stop at EOS")
    parser.add_argument(
        "--compile", action="store_true", help="rlvr's decode step through torch.compile"
    )
    parser.add_argument("--side", choices=("rlvr", "hf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # child process: one side, JSON out
        result = run_side(args.side, args.repeats, args.tokens, args.forced_length, args.compile)
        print(json.dumps(result))
        return
    flags = [f"--repeats={args.repeats}", f"--tokens={args.tokens}"]
    flags += ["--forced-length"] if args.forced_length else []
    flags += ["--compile"] if args.compile else []
    results = {}
    for side in ("rlvr", "hf"):
        out = subprocess.run(
            [sys.executable, __file__, f"--side={side}", *flags],
            capture_output=True,
            text=True,
            check=True,
        )
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    ours, theirs = results["rlvr"], results["hf"]
    print(
        f"threads={torch.get_num_threads()}  batch=16 prompts x 8 samples, "
        f"{'exactly' if args.forced_length else '<='} {args.tokens} new tokens"
        + (
            f"; rlvr's decode step compiled ({ours['warmup_s']:.1f} s warm-up call)"
            if args.compile
            else ""
        )
    )
    for name, r in (("rlvr HFEngine.generate", ours), ("transformers generate", theirs)):
        print(
            f"{name:<24} {r['ms']:8.1f} ms/batch {r['tokens_per_s']:9.0f} tokens/s "
            f"({r['tokens']} tokens)  peak +{r['peak_mib']:.1f} MiB"
        )
    print(f"tokens/s ratio (rlvr / HF)  {ours['tokens_per_s'] / theirs['tokens_per_s']:6.2f}x")


if __name__ == "__main__":
    main()
