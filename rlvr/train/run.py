"""A whole training run: evaluation schedule, logging, checkpoint, plot and summary."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.train.checkpoint import save_checkpoint
from rlvr.train.config import TrainConfig
from rlvr.train.logger import MetricsLogger
from rlvr.train.loop import Trainer
from rlvr.train.plots import plot_run
from rlvr.train.progress import progress_bar


@dataclass
class RunTotals:
    """Running totals of what the run cost, for summary.json."""

    generated_tokens: float = 0.0
    discarded_tokens: float = 0.0
    skipped_updates: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, metrics: dict[str, float]) -> None:
        self.generated_tokens += metrics.get("rollout/generated_tokens", 0.0)
        self.discarded_tokens += metrics.get("rollout/discarded_tokens", 0.0)
        self.skipped_updates += int(metrics.get("train/update_skipped", 0.0))
        for key, value in metrics.items():
            if key.startswith("time/"):
                self.seconds[key] = self.seconds.get(key, 0.0) + value


def run_training(cfg: TrainConfig) -> dict[str, Any]:
    """Train with `cfg`, writing config.yaml, metrics.jsonl, TensorBoard events, a PNG of
    the curves, a checkpoint and summary.json to `cfg.out`. Returns the summary."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    started = time.perf_counter()
    trainer = Trainer(cfg)
    totals = RunTotals()
    logger = MetricsLogger(out)
    try:
        summary = _run(trainer, totals, logger, started)
    except BaseException:
        # Interrupted or crashed: keep what was learned; metrics.jsonl is already on disk.
        _save(trainer, out)
        raise
    finally:
        logger.close()
    _save(trainer, out)
    plot_run(
        logger.records, out / "curves.png", title=f"{cfg.recipe} on {cfg.task}, seed {cfg.seed}"
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _save(trainer: Trainer, out: Path) -> None:
    save_checkpoint(
        out / "checkpoint",
        trainer.model,
        trainer.tokenizer,
        trainer.state_dict(),
        critic=trainer.critic,
    )


def _run(
    trainer: Trainer, totals: RunTotals, logger: MetricsLogger, started: float
) -> dict[str, Any]:
    cfg = trainer.cfg
    for i, metrics in enumerate(trainer.pretrain_critic() if trainer.critic else []):
        totals.add(metrics)  # critic pre-training's rollouts are part of the run's cost
        logger.log(
            -trainer.recipe.value_pretrain_steps + i,
            {f"pretrain/{k}": v for k, v in metrics.items()},
        )
    initial = trainer.evaluate()
    logger.log(0, initial)
    evals = [(0, initial)]
    bar = progress_bar(cfg.steps, cfg.progress, desc=f"{cfg.recipe} {cfg.task}")
    for step in range(1, cfg.steps + 1):
        trainer.step = step
        metrics = trainer.train_step()
        totals.add(metrics)
        budget = cfg.max_generated_tokens
        last = step == cfg.steps or (budget is not None and totals.generated_tokens >= budget)
        if step % cfg.eval_every == 0 or last:
            metrics.update(trainer.evaluate())
            evals.append((step, {k: v for k, v in metrics.items() if k.startswith("eval/")}))
        metrics["time/wall_s"] = time.perf_counter() - started
        logger.log(step, metrics)
        if cfg.save_every and step % cfg.save_every == 0 and not last:
            _save(trainer, Path(cfg.out))
        bar.update(metrics, evals[-1][1].get("eval/accuracy", 0.0))
        if last:
            break
    bar.close()
    return _summary(trainer, totals, evals, time.perf_counter() - started)


def _summary(trainer: Trainer, totals: RunTotals, evals, wall_s: float) -> dict[str, Any]:
    best_step, best = max(evals, key=lambda e: e[1]["eval/accuracy"])
    return {
        "recipe": trainer.cfg.recipe,
        "task": trainer.cfg.task,
        "seed": trainer.cfg.seed,
        "steps": trainer.step,
        "initial": evals[0][1],
        "final": evals[-1][1],
        "best": {"step": best_step, **best},
        "final_eval_items": trainer.last_eval_items,
        "generated_tokens": totals.generated_tokens,
        "discarded_tokens": totals.discarded_tokens,
        "skipped_updates": totals.skipped_updates,
        "seconds": {**totals.seconds, "wall_s": wall_s},
        "model": {k: v for k, v in trainer.model_info.items() if k != "settings"},
    }
