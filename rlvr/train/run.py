"""A whole training run: evaluation schedule, logging, checkpoints, plot and summary.

Runs survive: everything is validated before anything is written (`run_dir`); good
checkpoints are written atomically every `save_every` steps or `save_every_minutes`
(`checkpoint`); `mode="resume"` continues from the newest good one exactly as if the run
had never stopped; a crash or divergence writes `checkpoint.crash/` beside the good ones;
SIGINT/SIGTERM finish the step, checkpoint, and raise `RunInterrupted`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from rlvr.runlog.completions import CompletionsLog
from rlvr.runlog.logger import MetricsLogger
from rlvr.runlog.plots import plot_run
from rlvr.runlog.progress import StepBar, progress_bar
from rlvr.runlog.run_dir import check_out_dir, clear_run
from rlvr.runlog.trackers import RunInfo, check_installed, code_version, open_trackers
from rlvr.train import no_update
from rlvr.train.checkpoints.checkpoint import (
    CRASH,
    UNUSABLE,
    checkpoint_step,
    find_resumable,
    load_policy_weights,
    load_trainer_state,
    save_crash,
    save_rotating,
    set_aside_unusable,
)
from rlvr.train.config import TrainConfig, load_yaml, resolve_config
from rlvr.train.distributed.async_pipeline import make_trainer
from rlvr.train.distributed.ranks import follow, is_follower
from rlvr.train.loop import Trainer
from rlvr.train.records.completion_rows import completion_rows
from rlvr.train.stop import RunDiverged, RunInterrupted, StopRequest

# Config fields a resumed run may change: budgets, checkpointing and display.
RESUMABLE_CHANGES = {
    "out",
    "progress",
    "steps",
    "max_generated_tokens",
    "save_every",
    "save_every_minutes",
    "keep_checkpoints",
    "max_nonfinite_steps",
    "parallel",  # how the ranks share the work, not what they compute
    "report_to",  # where the metrics go, not what they are
    "tracker_project",
    "tracker_run_name",
    "completions_every",
    "completions_rows",
}


@dataclass
class RunTotals:
    """Running totals of what the run cost, for summary.json."""

    generated_tokens: float = 0.0
    discarded_tokens: float = 0.0
    skipped_updates: int = 0
    # Steps that changed no weight: the update skipped, or every row's gradient exactly 0
    # (train/backward_skipped: all advantages 0, e.g. every reward 0).
    still_steps: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, metrics: dict[str, float]) -> None:
        self.generated_tokens += metrics.get("rollout/generated_tokens", 0.0)
        self.discarded_tokens += metrics.get("rollout/discarded_tokens", 0.0)
        self.skipped_updates += int(metrics.get("train/update_skipped", 0.0))
        self.still_steps += int(
            bool(metrics.get("train/update_skipped")) or bool(metrics.get("train/backward_skipped"))
        )
        for key, value in metrics.items():
            if key.startswith("time/"):
                self.seconds[key] = self.seconds.get(key, 0.0) + value


def run_training(cfg: TrainConfig, mode: str = "new") -> dict[str, Any]:
    """Train with `cfg`, writing config.yaml, metrics.jsonl, TensorBoard events, a PNG of
    the curves, checkpoints and summary.json to `cfg.out`. Returns the summary.

    `mode`: "new" refuses a directory that already holds a run; "resume" continues the run
    in `cfg.out` from its newest good checkpoint (`cfg` may differ from the recorded config
    only in `RESUMABLE_CHANGES`); "overwrite" replaces the run there."""
    if is_follower():  # torchrun rank > 0: rank 0 writes the run (docs/distributed.md)
        return follow(cfg)
    out = check_out_dir(cfg.out, mode)
    check_installed(cfg.report_to)  # a missing tracker library: said before anything is written
    checkpoint = None
    if mode == "resume":
        check_same_run(out, cfg)
        checkpoint = find_resumable(out)
        if checkpoint is None:
            warnings.warn(
                f"{out} has no good checkpoint; starting the run again from step 0",
                stacklevel=2,
            )
    trainer = make_trainer(cfg)  # validates the task, model and recipe: nothing written yet
    try:
        return _run_training(cfg, mode, out, checkpoint, trainer)
    finally:
        trainer.close()  # the async trainer's rollout actors


def _run_training(cfg, mode, out, checkpoint, trainer) -> dict[str, Any]:
    state = _restore(trainer, checkpoint) if checkpoint else None
    finished = state is not None and _finished(cfg, state)
    if finished and (out / "summary.json").exists():
        raise ValueError(
            f"--resume {out}: the run already finished at step {state['step']} "
            f"(steps={cfg.steps}); raise --steps to continue it"
        )
    if mode == "resume":
        set_aside_unusable(out)  # kept for a post-mortem, never resumed from
    if mode == "overwrite":
        clear_run(out)
    elif mode == "resume" and state is None:
        clear_run(out, keep=UNUSABLE)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("summary.json", "summary.partial.json"):  # rewritten when it ends
        (out / stale).unlink(missing_ok=True)
    _write_atomic(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    run = _Run(trainer, out, state)
    return run.complete() if finished else run.execute()  # killed just before summary.json


def check_same_run(out: Path, cfg: TrainConfig) -> None:
    """Refuse to resume `out` with a config that changes what the run computes."""
    recorded = resolve_config(load_yaml(out / "config.yaml")).to_dict()
    wanted = cfg.to_dict()
    keys = (set(recorded) | set(wanted)) - RESUMABLE_CHANGES
    changed = sorted(k for k in keys if recorded.get(k) != wanted.get(k))
    if changed:
        key = changed[0]
        raise ValueError(
            f"--resume {out}: the run was made with {key}={recorded.get(key)!r}, not "
            f"{wanted.get(key)!r}; a resumed run may change only "
            f"{', '.join(sorted(RESUMABLE_CHANGES - {'out'}))}"
        )


def resume_config(out: str, sets: list[str] | None = None, **explicit: Any) -> TrainConfig:
    """The config of the run in `out` (its config.yaml) with resumable changes applied."""
    path = Path(out) / "config.yaml"
    if not str(out).strip():
        raise ValueError("--resume needs the run directory, got an empty string")
    if not path.is_file():
        raise ValueError(f"--resume {out}: no run to resume there (no config.yaml)")
    return resolve_config(load_yaml(path), sets, **{**explicit, "out": str(out)})


def _restore(trainer: Trainer, checkpoint: Path) -> dict[str, Any]:
    """Load the checkpoint's weights and state into `trainer`; returns the run state."""
    state = load_trainer_state(checkpoint)
    load_policy_weights(trainer.full_policy, checkpoint)  # LoRA: the adapter, onto the base
    if trainer.critic is not None:
        trainer.critic.load_state_dict(torch.load(checkpoint / "critic.pt", weights_only=True))
    trainer.load_state_dict(state)
    trainer.engine.sync_weights()
    return {"step": trainer.step, **state["run"]}


def _finished(cfg: TrainConfig, state: dict[str, Any]) -> bool:
    budget = cfg.max_generated_tokens
    spent = state["totals"]["generated_tokens"]
    return state["step"] >= cfg.steps or (budget is not None and spent >= budget)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class _Diverged(Exception):
    def __init__(self, step: int, reason: str) -> None:
        self.step, self.reason = step, reason
        super().__init__(f"diverged at step {step}: {reason}")


class _Run:
    """One invocation of a run: fresh (`state` None) or resumed from a checkpoint."""

    def __init__(self, trainer: Trainer, out: Path, state: dict[str, Any] | None) -> None:
        self.trainer, self.out, self.cfg = trainer, out, trainer.cfg
        self.bar: StepBar | None = None
        self.totals = RunTotals(**state["totals"]) if state else RunTotals()
        self.evals = [tuple(e) for e in state["evals"]] if state else []
        self.streak = state["nonfinite_streak"] if state else 0
        self.started = time.perf_counter() - (state["wall_s"] if state else 0.0)
        self.resumed = state is not None
        records = _kept_records(out, state["metrics_lines"]) if state else []
        self.logger = MetricsLogger(out, records=records, trackers=self._trackers(records))
        self.completions = CompletionsLog(
            out,
            self.cfg.completions_every,
            self.cfg.completions_rows,
            resumed_step=trainer.step if state else None,
        )
        self.saved_step = trainer.step if state else None
        self.last_save = time.perf_counter()

    def _trackers(self, records: list[dict[str, Any]]) -> list:
        cfg, step = self.cfg, self.trainer.step
        info = RunInfo(
            self.out,
            cfg.tracker_project,
            cfg.tracker_run_name or self.out.resolve().name,
            purge_step=step + 1 if records else None,  # TensorBoard forgets the redone steps
            resumed_step=step if self.resumed else None,
        )
        return open_trackers(cfg.report_to, info, cfg.to_dict())

    def _log_completions(self, step: int) -> None:
        """The step's completions table, from the batch the update used."""
        trainer = self.trainer
        collected, prepared = trainer.last_batch
        rows = completion_rows(
            collected,
            prepared,
            lambda ids: trainer.tokenizer.decode(ids, skip_special=True),
            step,
            self.cfg.seed,
            self.cfg.completions_rows,
        )
        self.completions.write(step, rows)
        self.logger.log_table(step, "completions", rows)

    def execute(self) -> dict[str, Any]:
        with StopRequest() as stop:
            try:
                summary = self._loop(stop)
            except _Diverged as err:
                self._save_crash()
                self._finish_partial("diverged")
                raise RunDiverged(f"{err}; {self._last_good()}") from None
            except KeyboardInterrupt:  # a second signal: the step is abandoned
                self._save_crash()
                self._finish_partial("interrupted")
                raise self._interrupted() from None
            except RunInterrupted:
                raise
            except BaseException:
                self._save_crash()  # a half-updated state: never over the good ones
                raise
            finally:
                self.logger.close()
                if self.bar is not None:  # an error's line then starts a line of its own
                    self.bar.close()
        return self.complete(summary)

    def complete(self, summary: dict[str, Any] | None = None) -> dict[str, Any]:
        """Curves and summary.json of a finished run."""
        self.logger.close()
        summary = summary or self._summary("finished")
        self._plot()
        _write_atomic(self.out / "summary.json", json.dumps(summary, indent=2))
        return summary

    def _loop(self, stop: StopRequest) -> dict[str, Any]:
        trainer, cfg = self.trainer, self.cfg
        if not self.resumed:
            self._start()
        bar = self.bar = progress_bar(
            cfg.steps, cfg.progress, desc=f"{cfg.recipe} {cfg.task}", initial=trainer.step
        )
        for step in range(trainer.step + 1, cfg.steps + 1):
            metrics = self._guarded(step, trainer.train_step)
            trainer.step = step
            if self.completions.due(step):
                self._log_completions(step)
            self.totals.add(metrics)
            if no_update.due(step, cfg.steps, self.totals.still_steps):
                no_update.say(no_update.explain(step, metrics, trainer.recipe, cfg))
            budget = cfg.max_generated_tokens
            spent = self.totals.generated_tokens
            last = step == cfg.steps or (budget is not None and spent >= budget)
            if step % cfg.eval_every == 0 or last:
                metrics.update(self._guarded(step, trainer.evaluate))
                self.evals.append((step, {k: v for k, v in metrics.items() if "eval/" in k}))
            metrics["time/wall_s"] = time.perf_counter() - self.started
            self.logger.log(step, metrics)
            self._check_finite(step, metrics)
            bar.update(metrics, self.evals[-1][1].get("eval/accuracy", 0.0))
            if last:
                break
            if self._due(step) or stop.requested:
                self._save()
            if stop.requested:
                bar.close()
                self._finish_partial("interrupted")
                raise self._interrupted()
        bar.close()
        self._save()
        return self._summary("finished")

    def _start(self) -> None:
        trainer = self.trainer
        for i, metrics in enumerate(trainer.pretrain_critic() if trainer.critic else []):
            self.totals.add(metrics)  # critic pre-training's rollouts are part of the cost
            self.logger.log(
                -trainer.recipe.value_pretrain_steps + i,
                {f"pretrain/{k}": v for k, v in metrics.items()},
            )
        initial = self._guarded(0, trainer.evaluate)
        self.logger.log(0, initial)
        self.evals = [(0, initial)]

    def _guarded(self, step: int, fn):
        """Run `fn`; sampling from non-finite probabilities means the run diverged."""
        try:
            return fn()
        except RuntimeError as err:
            text = str(err).lower()
            if ("inf" in text and "nan" in text) or not _finite(self.trainer.full_policy):
                raise _Diverged(step, f"sampling failed: {str(err).splitlines()[0]}") from None
            raise

    def _check_finite(self, step: int, metrics: dict[str, float]) -> None:
        if not _finite(self.trainer.full_policy):
            raise _Diverged(step, "the policy weights are no longer finite")
        losses = [v for k, v in metrics.items() if k.startswith("loss/")]
        bad = metrics.get("train/nonfinite_skipped", 0.0) > 0 or not all(
            math.isfinite(v) for v in losses
        )
        self.streak = self.streak + 1 if bad else 0
        if self.streak >= self.cfg.max_nonfinite_steps:
            raise _Diverged(
                step,
                f"{self.streak} consecutive steps with a non-finite loss or gradient norm "
                f"(updates skipped: train/nonfinite_skipped; limit max_nonfinite_steps="
                f"{self.cfg.max_nonfinite_steps})",
            )

    def _due(self, step: int) -> bool:
        every, minutes = self.cfg.save_every, self.cfg.save_every_minutes
        by_time = minutes > 0 and time.perf_counter() - self.last_save >= minutes * 60
        return bool(every and step % every == 0) or by_time

    def _state(self) -> dict[str, Any]:
        state = self.trainer.state_dict()
        state["run"] = {
            "totals": asdict(self.totals),
            "evals": [list(e) for e in self.evals],
            "nonfinite_streak": self.streak,
            "wall_s": time.perf_counter() - self.started,
            "metrics_lines": len(self.logger.records),
        }
        return state

    def _save(self) -> None:
        if self.saved_step == self.trainer.step:
            return
        t = self.trainer
        keep = self.cfg.keep_checkpoints
        self.logger.sync()  # the lines the checkpoint counts are on disk before it is
        save_rotating(
            self.out, t.full_policy, t.tokenizer, self._state(), critic=t.critic, keep=keep
        )
        self.saved_step = t.step
        self.last_save = time.perf_counter()

    def _save_crash(self) -> None:
        t = self.trainer
        try:
            save_crash(self.out, t.full_policy, t.tokenizer, self._state(), critic=t.critic)
        except Exception as err:  # the original error matters more
            print(f"rlvr: warning: could not write {CRASH}/: {err}", file=sys.stderr)

    def _interrupted(self) -> RunInterrupted:
        good = self._good_path()
        return RunInterrupted(self.out, checkpoint_step(good) if good else 0, good)

    def _good_path(self) -> Path | None:
        return find_resumable(self.out)

    def _last_good(self) -> str:
        good = self._good_path()
        if good is None:
            return f"no good checkpoint was written (the crash state is in {self.out / CRASH})"
        return f"last good checkpoint at {good} (step {checkpoint_step(good)})"

    def _finish_partial(self, status: str) -> None:
        """Curves and a summary of what ran, as summary.partial.json: summary.json is
        written only by a finished run (rlvr compare counts on it)."""
        try:
            self._plot()
            summary = (
                partial(self._summary(status), self.evals) if self.evals else {"status": status}
            )
            _write_atomic(self.out / "summary.partial.json", json.dumps(summary, indent=2))
        except Exception as err:
            print(f"rlvr: warning: could not write the partial summary: {err}", file=sys.stderr)

    def _plot(self) -> None:
        cfg = self.cfg
        title = f"{cfg.recipe} on {cfg.task}, seed {cfg.seed}"
        plot_run(self.logger.records, self.out / "curves.png", title=title)

    def _summary(self, status: str) -> dict[str, Any]:
        trainer, totals = self.trainer, self.totals
        return {
            "recipe": trainer.cfg.recipe,
            "task": trainer.cfg.task,
            "seed": trainer.cfg.seed,
            "status": status,
            "steps": trainer.step,
            "initial": self.evals[0][1],
            "final": self.evals[-1][1],
            # No "best" evaluation: a maximum over evaluations of the same test items would
            # be a number chosen on the test set.
            "final_eval_items": getattr(trainer, "last_eval_items", []),
            "generated_tokens": totals.generated_tokens,
            "discarded_tokens": totals.discarded_tokens,
            "skipped_updates": totals.skipped_updates,
            "seconds": {**totals.seconds, "wall_s": time.perf_counter() - self.started},
            "model": {k: v for k, v in trainer.model_info.items() if k != "settings"},
            **code_version(),
        }


def partial(summary: dict[str, Any], evals: list[tuple]) -> dict[str, Any]:
    """A stopped run's summary: no `final` evaluation (the last one may be step 0's, and
    none follows the last step); an evaluation after step 0 is `last_eval`, with its step
    and its per-item results (`last_eval_items`)."""
    out = {k: v for k, v in summary.items() if k not in ("final", "final_eval_items")}
    step, metrics = evals[-1]
    if step > 0:
        out["last_eval"] = {"step": step, **metrics}
        out["last_eval_items"] = summary.get("final_eval_items", [])
    return out


def _finite(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _kept_records(out: Path, count: int) -> list[dict[str, Any]]:
    """The first `count` records of metrics.jsonl (those the checkpoint had seen); later
    ones, logged after it, are dropped so that no step appears twice."""
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines()[:count] if path.exists() else []
    records = [json.loads(line) for line in lines]
    _write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))
    return records
