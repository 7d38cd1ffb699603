"""Synchronous vs asynchronous (Ray, 2 rollout actors, max_lag 1 and 2) training on the
embedded task: steps/s, generated tokens/s, and held-out accuracy after the same number of
generated tokens.

    PYTHONPATH=. python benchmarks/bench_async.py --tokens 40000 --out runs/bench_async.json

Every mode trains until its generated tokens (dropped stale rounds included) reach
`--tokens`, then evaluates once; the clock covers the training steps only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import ray
import torch

from rlvr.train.config import resolve_config
from rlvr.train.distributed.async_pipeline import make_trainer

MODES = {
    "sync": {"rollout_actors": 0, "max_lag": 0},
    "async lag 0": {"rollout_actors": 2, "max_lag": 0},
    "async lag 1": {"rollout_actors": 2, "max_lag": 1},
    "async lag 2": {"rollout_actors": 2, "max_lag": 2},
}


def run_mode(name: str, budget: float, seed: int, eval_size: int) -> dict:
    cfg = resolve_config(
        {
            "recipe": "grpo",
            "tis_cap": 2.0,
            "task_options": {"digits": 2, "ops": "+"},
            "prompts_per_step": 16,
            "group_size": 8,
            "max_new_tokens": 14,
            "eval_size": eval_size,
            "seed": seed,
            "progress": False,
            "out": tempfile.mkdtemp(),
            **MODES[name],
        }
    )
    trainer = make_trainer(cfg)
    initial = trainer.evaluate()["eval/accuracy"] if name == "sync" else None
    try:
        tokens = steps = lag_sum = rounds = dropped = 0.0
        started = time.perf_counter()
        while tokens < budget:
            metrics = trainer.train_step()
            steps += 1
            tokens += metrics["rollout/generated_tokens"]
            used = sum(v for k, v in metrics.items() if k.endswith("_rounds") and "lag_" in k)
            rounds += used
            lag_sum += metrics.get("async/lag_mean", 0.0) * used
            dropped += metrics.get("async/dropped_rounds", 0.0)
        seconds = time.perf_counter() - started
        accuracy = trainer.evaluate()["eval/accuracy"]
    finally:
        trainer.close()
    return {
        "mode": name,
        "steps": steps,
        "generated_tokens": tokens,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "tokens_per_s": tokens / seconds,
        "mean_lag": lag_sum / max(rounds, 1),
        "dropped_rounds": dropped,
        "eval_accuracy": accuracy,
        "initial_accuracy": initial,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-size", type=int, default=300)
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = [run_mode(m, args.tokens, args.seed, args.eval_size) for m in args.modes]
    finally:
        ray.shutdown()
    print("| mode | steps | gen. tokens | s | steps/s | tokens/s | mean lag | dropped | acc. |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['steps']:.0f} | {r['generated_tokens']:.0f} | "
            f"{r['seconds']:.1f} | {r['steps_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
            f"{r['mean_lag']:.2f} | {r['dropped_rounds']:.0f} | {r['eval_accuracy']:.3f} |"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
