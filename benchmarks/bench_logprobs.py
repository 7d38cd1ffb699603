"""Peak memory and time of the trainer's log-prob forward and backward with a large
vocabulary: the LM head in chunks (recomputed in backward) against the whole logits.

A tiny Qwen2 backbone (hidden 64, 2 layers) with Qwen2.5's vocabulary of 151,936 tokens,
8 rows × 16 prompt + 256 response tokens: the whole logits are 8 · 256 · 151,936 float32
values (1.2 GiB), the biggest tensor of the step, kept for backward, with as much again
for their gradient. `rlvr.models.logprobs.head_logprobs` takes `CHUNK_VALUES` (64 MiB) of
them at a time instead. Each measurement runs in a fresh process (peak resident memory
only grows within a process), the two alternating, `--rounds` times; the script prints
each one's median peak memory above what the process held before the forward (resident
memory on a CPU, `torch.cuda.max_memory_allocated` on a GPU, used when there is one),
the median seconds of one forward + backward, and the ratios.

Run: python benchmarks/bench_logprobs.py [--rounds 3] [--vocab 151936] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WHOLE = 1 << 62  # a chunk budget no batch reaches: one chunk, the whole logits


def child(mode: str, vocab: int, tokens: int) -> None:
    import torch
    from harness import peak_bytes

    from rlvr.models import build_tiny_policy, logprobs, response_logprobs, tiny_qwen2_config

    if mode == "whole":
        logprobs.CHUNK_VALUES = WHOLE
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = tiny_qwen2_config(vocab_size=vocab, hidden=64, layers=2, heads=2, kv_heads=1)
    model = build_tiny_policy(config, seed=0).to(device)
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, vocab, (8, 16), generator=generator).tolist()
    response_ids = torch.randint(2, vocab, (8, tokens), generator=generator)
    response_mask = torch.ones(8, tokens)
    before = peak_bytes()
    start = time.perf_counter()
    lp = response_logprobs(model, prompts, response_ids, response_mask, 0, return_entropy=False)
    lp.sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = peak_bytes()
    print(json.dumps({"peak_mib": (peak - before) / 2**20, "seconds": seconds, "device": device}))


def measure(mode: str, vocab: int, tokens: int) -> dict[str, float]:
    args = [sys.executable, __file__, "--child", mode, "--vocab", str(vocab)]
    out = subprocess.run([*args, "--tokens", str(tokens)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{mode} measurement failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--tokens", type=int, default=256, help="response tokens per row")
    parser.add_argument("--child", choices=("chunked", "whole"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.vocab, args.tokens)
        return
    runs: dict[str, list[dict[str, float]]] = {"chunked": [], "whole": []}
    for i in range(args.rounds):
        for mode in ("chunked", "whole") if i % 2 == 0 else ("whole", "chunked"):
            runs[mode].append(measure(mode, args.vocab, args.tokens))
    med = {
        mode: {k: statistics.median(float(r[k]) for r in rows) for k in ("peak_mib", "seconds")}
        for mode, rows in runs.items()
    }
    whole_gib = 8 * args.tokens * args.vocab * 4 / 2**30
    print(
        f"8 rows x {args.tokens} tokens, vocabulary {args.vocab}, "
        f"{runs['chunked'][0]['device']}: whole logits {whole_gib:.2f} GiB"
    )
    for mode, m in med.items():
        print(f"{mode:<8} peak +{m['peak_mib']:8.0f} MiB  {m['seconds']:6.2f} s forward+backward")
    print(
        f"peak memory whole / chunked {med['whole']['peak_mib'] / med['chunked']['peak_mib']:.1f}x, "
        f"time chunked / whole {med['chunked']['seconds'] / med['whole']['seconds']:.2f}x"
    )


if __name__ == "__main__":
    main()
