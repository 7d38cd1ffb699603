"""Manipulation check for the rollout-correction comparison: how large is the sampler–learner
mismatch at each `sampler_lag`? GRPO on 2-digit addition (embedded model), 8 prompts × 8
samples, lr 1e-4 (the comparison's settings), 12 steps per lag, no eval; prints and writes
`lag_mismatch.json`: per lag, the mean over the steps whose sampler is fully lagged
(step > lag) of every `rollout/mismatch_*` metric. Run from the repository root:

    python docs/compare-rollout-correction/measure_lag.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer

LAGS = (0, 1, 2, 4, 8)
STEPS = 12
KEYS = (
    "rollout/mismatch_k1",
    "rollout/mismatch_k3",
    "rollout/mismatch_max_abs_log_ratio",
    "rollout/mismatch_frac_outside_band",
)


def measure(lag: int, out: str) -> dict[str, float]:
    torch.set_num_threads(1)
    cfg = resolve_config({
        "task": "arithmetic", "task_options": {"digits": 2, "ops": "+"},
        "prompts_per_step": 8, "group_size": 8, "lr": 1e-4, "steps": STEPS,
        "sampler_lag": lag, "sync_probe": False, "progress": False, "out": out,
    })  # fmt: skip
    trainer = Trainer(cfg)
    rows = []
    for _ in range(STEPS):
        metrics = trainer.train_step()
        trainer.step += 1
        if trainer.step > lag:
            rows.append({k: metrics[k] for k in KEYS})
    return {k: float(np.mean([r[k] for r in rows])) for k in KEYS} | {"steps": len(rows)}


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        found = {lag: measure(lag, out) for lag in LAGS}
    for lag, row in found.items():
        print(lag, {k.split("/")[-1]: f"{v:.3g}" for k, v in row.items()})
    path = Path(__file__).with_name("lag_mismatch.json")
    path.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
