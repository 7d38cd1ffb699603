"""Rollout throughput: rlvr's HFEngine against transformers' `generate`, side by side.

Same warm-started embedded policy, same prompts (16 × group 8), same budget (14 new
tokens), temperature 1. `generate` is asked for what RL needs: the sampled tokens *and*
their log-probs (`output_scores`), as TRL's CPU path does. Prints seconds per batch and
the ratio. Run: .venv/bin/python benchmarks/bench_rollout.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.models import load_policy
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import make_task


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def hf_generate(model, tokenizer, prompts, group, max_new_tokens, seed):
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
        )
        scores = torch.stack(out.scores, 1).log_softmax(-1)  # (B, T, V)
        new = out.sequences[:, width:]
        return scores.gather(-1, new[..., None]).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    model, tokenizer, _ = load_policy(
        "embedded", "arithmetic", {"digits": 2, "ops": "+"}, 0, progress=False
    )
    model.eval()
    prompts = [p.prompt for p in make_task("arithmetic").problems("eval")[:16]]
    params = SamplingParams(group_size=8, temperature=1.0, max_new_tokens=14)
    engine = HFEngine(model, tokenizer)
    ours = _time(
        lambda: engine.generate(prompts, params, torch.Generator().manual_seed(0)), args.repeats
    )
    theirs = _time(lambda: hf_generate(model, tokenizer, prompts, 8, 14, 0), args.repeats)
    print(f"threads={torch.get_num_threads()}  batch=16 prompts x 8 samples, <=14 new tokens")
    print(f"rlvr HFEngine.generate     {ours * 1000:8.1f} ms/batch")
    print(f"transformers generate      {theirs * 1000:8.1f} ms/batch")
    print(f"speed ratio (HF / rlvr)    {theirs / ours:8.2f}x")


if __name__ == "__main__":
    main()
