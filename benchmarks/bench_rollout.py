"""Rollout throughput: rlvr's HFEngine against transformers' `generate`, side by side.

Same warm-started embedded policy, same prompts (16 × group 8), same budget (14 new
tokens), temperature 1. `generate` is asked for what RL needs: the sampled tokens *and*
their log-probs (`output_scores`), as TRL's CPU path does. Prints seconds per batch,
generated tokens per second (every row's tokens up to its EOS, counted from the
returned masks), the ratio, and the peak memory each side adds over the loaded model.
Each side runs in a process of its own (sharing one slowed both, unequally), and the
driver asks them in turn for one call per round, the order flipped every round, so that
drift in the machine's speed hits both alike; the ratio of the medians and the median of
the per-round ratios are printed. Memory: the growth of each process's peak resident set
(CPU) or `torch.cuda.max_memory_allocated` (GPU). With `--forced-length` EOS is never
sampled, so both sides generate exactly `--tokens` tokens per row.
With `--compile` rlvr's decode step runs through `torch.compile` (`engine_options:
{compile: true}`); the compilation happens in the warm-up call, whose seconds are printed.
Run: .venv/bin/python benchmarks/bench_rollout.py [--repeats 10] [--forced-length] [--compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from harness import contestants, peak_bytes

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import make_task
from rlvr.warmstart import load_policy


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


def _side(side: str, tokens: int, forced: bool, compile: bool):
    """One side over a freshly loaded policy: a call returning the tokens it generated."""
    model, tokenizer, _ = load_policy(
        "embedded", "arithmetic", {"digits": 2, "ops": "+"}, 0, progress=False
    )
    model.eval()
    prompts = [p.prompt for p in make_task("arithmetic").problems("eval")[:16]]
    if side == "hf":
        return lambda: hf_generate(model, tokenizer, prompts, 8, tokens, 0, forced)
    params = SamplingParams(group_size=8, temperature=1.0, max_new_tokens=tokens)
    engine = HFEngine(model, _NoEos(tokenizer) if forced else tokenizer, compile=compile)
    return lambda: int(
        engine.generate(prompts, params, torch.Generator().manual_seed(0)).response_mask.sum()
    )


def serve(side: str, tokens: int, forced: bool, compile: bool) -> None:
    """Child process: one side. After a warm-up call (rlvr's compiles with `compile`) it
    prints one JSON line {warmup_s, tokens}; then, per line read, it times one call and
    prints {s}; at the end of input it prints the peak memory its calls added."""
    before = peak_bytes()
    run = _side(side, tokens, forced, compile)
    start = time.perf_counter()
    generated = run()
    print(json.dumps({"warmup_s": time.perf_counter() - start, "tokens": generated}), flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        run()
        print(json.dumps({"s": time.perf_counter() - start}), flush=True)
    print(json.dumps({"peak_mib": (peak_bytes() - before) / 2**20}), flush=True)


def alternate(flags: list[str], repeats: int) -> dict[str, dict]:
    """Both sides, each in its own process, asked in turn for one call per round (the
    order flipped every round), so that drift in the machine's speed hits both alike.
    Returns per side: median ms, tokens per call, tokens/s, warm-up seconds, peak MiB;
    and `paired`, the median over rounds of the tokens/s ratio within a round."""
    argv = lambda side: [sys.executable, __file__, f"--side={side}", *flags]  # noqa: E731
    with contestants(("rlvr", "hf"), argv) as procs:
        out = {side: {"times": [], **p.receive()} for side, p in procs.items()}
        for i in range(repeats):
            for side in ("rlvr", "hf") if i % 2 == 0 else ("hf", "rlvr"):
                out[side]["times"].append(procs[side].step()["s"])
        for side, proc in procs.items():
            r = out[side]
            r.update(proc.finish())
            r["ms"] = statistics.median(r["times"]) * 1000
            r["tokens_per_s"] = r["tokens"] / statistics.median(r["times"])
    rlvr, hf = out["rlvr"], out["hf"]
    out["paired"] = statistics.median(
        (rlvr["tokens"] / a) / (hf["tokens"] / b)
        for a, b in zip(rlvr["times"], hf["times"], strict=True)
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds")
    parser.add_argument("--tokens", type=int, default=14, help="max new tokens per row")
    parser.add_argument("--forced-length", action="store_true", help="never stop at EOS")
    parser.add_argument(
        "--compile", action="store_true", help="rlvr's decode step through torch.compile"
    )
    parser.add_argument("--side", choices=("rlvr", "hf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # child process: one side, driven through stdin/stdout
        serve(args.side, args.tokens, args.forced_length, args.compile)
        return
    flags = [f"--tokens={args.tokens}"]
    flags += ["--forced-length"] if args.forced_length else []
    flags += ["--compile"] if args.compile else []
    results = alternate(flags, args.repeats)
    ours, theirs = results["rlvr"], results["hf"]
    print(
        f"threads={torch.get_num_threads()}  batch=16 prompts x 8 samples, "
        f"{'exactly' if args.forced_length else '<='} {args.tokens} new tokens; "
        f"{args.repeats} alternating rounds"
        + (
            f"; rlvr's decode step compiled ({ours['warmup_s']:.1f} s warm-up call)"
            if args.compile
            else ""
        )
    )
    for name, side in (("rlvr HFEngine.generate", "rlvr"), ("transformers generate", "hf")):
        r = results[side]
        print(
            f"{name:<24} {r['ms']:8.1f} ms/batch {r['tokens_per_s']:9.0f} tokens/s "
            f"({r['tokens']} tokens)  peak +{r['peak_mib']:.1f} MiB"
        )
    print(
        f"tokens/s ratio (rlvr / HF)  {ours['tokens_per_s'] / theirs['tokens_per_s']:6.2f}x "
        f"(ratio of medians); per-round paired median {results['paired']:.2f}x"
    )


if __name__ == "__main__":
    main()
