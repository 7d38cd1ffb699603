"""Manipulation check of docs/compare-rollout-correction: is the sampler/learner mismatch
non-zero under async lag? 6 steps of GRPO on the embedded 2-digit addition task through
the Ray pipeline, at max_lag 0 (one actor: the matched sampler) and max_lag 1 (two
actors), logging rollout/mismatch_* per step to mismatch.json beside this file.

    python docs/compare-rollout-correction/measure_mismatch.py   # ~5 min on 2 CPU cores
"""

import json
import tempfile
import time
from pathlib import Path

import ray

from rlvr.train.config import resolve_config
from rlvr.train.distributed.async_pipeline import AsyncTrainer

KEYS = ("rollout/mismatch", "async/lag_mean", "async/lag_max", "train/sync_probe_gap")
SMALL = {
    "task_options": {"digits": 2, "ops": "+"},
    "prompts_per_step": 8,
    "group_size": 8,
    "max_new_tokens": 14,
    "eval_size": 16,
    "eval_every": 100,
    "progress": False,
    "lr": 1e-4,
}

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
out = {}
for lag in (0, 1):
    started = time.time()
    run = {"out": tempfile.mkdtemp(), "rollout_actors": 2 if lag else 1, "max_lag": lag}
    trainer = AsyncTrainer(resolve_config({**SMALL, **run}))
    rows = []
    try:
        for _ in range(6):
            metrics = trainer.train_step()
            rows.append({k: v for k, v in metrics.items() if k.startswith(KEYS)})
    finally:
        trainer.close()
    out[lag] = {"rows": rows, "seconds": time.time() - started}
(Path(__file__).parent / "mismatch.json").write_text(json.dumps(out, indent=1))
