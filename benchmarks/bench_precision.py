"""The demo's training step in float32 and in bf16, side by side (issue 30).

Two trainers on `configs/demo.yaml`'s setting (embedded model, 16 prompts × 8 samples):
`precision: fp32` (the demo), and `precision: bf16` with `sampler_precision: bf16`
(autocast over float32 master weights, sampling from a bf16 copy synced after the update).
They take their steps in turn, fp32 then bf16, so that load from other processes hits both
alike; the first step of each is warm-up. Prints each one's median s/step with its rollout
and train parts, the paired median of fp32/bf16 per round, and the mismatch the bf16
sampler showed.
Run: .venv/bin/python benchmarks/bench_precision.py [--steps 8] [--no-probe]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rlvr.train import Trainer
from rlvr.train.config import load_yaml, resolve_config

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
SETTINGS = {
    "fp32": {},
    "bf16": {"precision": "bf16", "sampler_precision": "bf16"},
}
PARTS = ("step_s", "time/rollout_s", "time/train_s", "rollout/mismatch_k3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8, help="counted steps per setting")
    parser.add_argument("--no-probe", action="store_true", help="sync_probe: false for both")
    args = parser.parse_args()
    base = {**load_yaml(DEMO), "progress": False, "out": "/tmp/rlvr-bench-precision"}
    if args.no_probe:
        base["sync_probe"] = False
    trainers = {
        name: Trainer(resolve_config({**base, **extra})) for name, extra in SETTINGS.items()
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trainers}
    for _ in range(args.steps + 1):
        for name, trainer in trainers.items():
            start = time.perf_counter()
            metrics = trainer.train_step()
            rows[name].append({**metrics, "step_s": time.perf_counter() - start})
    rows = {name: r[1:] for name, r in rows.items()}  # the warm-up step is not counted
    print(f"demo step ({DEMO.name}), {args.steps} counted steps each, alternating")
    for name, r in rows.items():
        parts = ", ".join(f"{k} {statistics.median(x.get(k, 0.0) for x in r):.4g}" for k in PARTS)
        print(f"{name}: {parts}")
    paired = statistics.median(
        a["step_s"] / b["step_s"] for a, b in zip(rows["fp32"], rows["bf16"], strict=True)
    )
    print(f"fp32/bf16 step, paired median over rounds: {paired:.2f}x")


if __name__ == "__main__":
    main()
