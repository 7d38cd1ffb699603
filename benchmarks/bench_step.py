"""Seconds per training step by phase, per recipe, and what zero-advantage skipping saves.

Every row runs the same embedded setting as `make demo` (16 prompts × 8 samples, ≤ 17
tokens: the task's default budget) for a few steps after a warm-up step, in one process,
one after another:
  - recipes grpo, dr_grpo, dapo, gspo, cispo, ppo: s/step, rollout vs train seconds;
  - gspo with and without `zero_adv_skip`: train seconds and their ratio (the gradient is
    identical by construction; tests/algo prove it).
With `--compile` the rollouts decode through `torch.compile` (`engine_options: {compile:
true}`); the compilation happens in the warm-up step.
Run: .venv/bin/python benchmarks/bench_step.py [--steps 5] [--recipes grpo --no-skip]
     [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlvr.train import Trainer
from rlvr.train.config import resolve_config

BASE = {"task_options": {"digits": 2, "ops": "+"}, "progress": False, "out": "/tmp/rlvr-bench"}


def measure(recipe: str, steps: int, **overrides) -> dict[str, float]:
    trainer = Trainer(resolve_config({**BASE, "recipe": recipe, **overrides}))
    trainer.train_step()  # warm-up
    rows = []
    for _ in range(steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        rows.append({**metrics, "step_s": time.perf_counter() - start})
    median = lambda key: statistics.median(r.get(key, 0.0) for r in rows)  # noqa: E731
    return {
        k: median(k)
        for k in (
            "step_s",
            "time/rollout_s",
            "time/train_s",
            "train/skipped_rows",
            "time/policy_update_s",
            "rollout/generated_tokens",
        )
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--recipes", default="grpo,dr_grpo,dapo,gspo,cispo,ppo", help="comma list of recipes"
    )
    parser.add_argument("--no-skip", action="store_true", help="leave out the gspo skip rows")
    parser.add_argument(
        "--compile", action="store_true", help="decode through torch.compile (engine_options)"
    )
    args = parser.parse_args()
    extra = {"engine_options": {"compile": True}} if args.compile else {}
    print(f"{'recipe':<22} {'s/step':>7} {'rollout s':>9} {'train s':>8} {'tokens':>7}")
    for recipe in args.recipes.split(","):
        m = measure(recipe, args.steps, **extra)
        print(
            f"{recipe:<22} {m['step_s']:7.3f} {m['time/rollout_s']:9.3f} "
            f"{m['time/train_s']:8.3f} {m['rollout/generated_tokens']:7.0f}"
        )
    if args.no_skip:
        return
    skip = measure("gspo", args.steps, zero_adv_skip=True, **extra)
    full = measure("gspo", args.steps, zero_adv_skip=False, **extra)
    print(
        f"\ngspo zero-adv skip: policy update {skip['time/policy_update_s']:.3f} s with "
        f"{skip['train/skipped_rows']:.0f} rows skipped, {full['time/policy_update_s']:.3f} s "
        f"without; ratio {full['time/policy_update_s'] / max(skip['time/policy_update_s'], 1e-9):.2f}x"
    )


if __name__ == "__main__":
    main()
