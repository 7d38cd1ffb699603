"""`rlvr eval --run RUN_DIR`: evaluate a run's newest checkpoint as the run evaluated it.

The run's config.yaml (read through `rlvr.train.config`, as `--resume` reads it) gives the
task and its options (template, data, eval_data, fields), the policy options (chat
template, system prompt, dtype, device), the response budget, the sampling settings, the
eval size, samples and seed, and the engine; an explicit flag or `--set` overrides any of
them. `--model RUN_DIR/checkpoint*/policy` of a run directory reads the run's config too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULTS = {
    "model": "embedded",
    "task": "arithmetic",
    "temperature": 1.0,
    "top_p": 1.0,
    "samples": 1,
    "size": 0,
    "seed": 0,
    "engine": "hf",
}
"""`rlvr eval`'s defaults where neither a flag nor a run gives a value."""

TRAINING_ONLY_POLICY = ("lora", "gradient_checkpointing")
"""Policy options that shape training only: a checkpoint holds LoRA weights merged."""


def resolve_eval_args(args: argparse.Namespace) -> None:
    """Fill `args` in place: explicit flags, else the run's settings, else `DEFAULTS`."""
    run = _run_dir(args)
    from_run: dict[str, Any] = {}
    if run is not None:
        from_run = run_settings(run, args)
        if args.model is None:
            args.model = str(run / "checkpoint" / "policy")
        print(
            f"rlvr: evaluating {args.model} with the settings of the run in {run} (its "
            f"config.yaml: task {from_run['task']!r}, its options, template and sampling); "
            "explicit flags override them",
            file=sys.stderr,
        )
    for name, default in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, from_run.get(name, default))
    if args.max_new_tokens is None and args.task == from_run.get("task"):
        args.max_new_tokens = from_run["max_new_tokens"]
    if getattr(args, "tools", None) is not None and run is None:
        raise ValueError("--tools applies to a run's checkpoint (--run); this eval has no run")
    if getattr(args, "items", None) is not None and args.k is None and args.data is None:
        raise ValueError(
            f"--items {args.items}: the per-item records are written by the pass@k "
            "evaluation, which --k K (or --data FILE) selects; add --k 1 for one sample per item"
        )


def _run_dir(args: argparse.Namespace) -> Path | None:
    """The run `--run` names, or the run whose checkpoint `--model` is (a directory
    `RUN/checkpoint*/policy` beside RUN/config.yaml)."""
    if args.run is not None:
        run = Path(args.run)
        if not (run / "config.yaml").is_file():
            raise ValueError(
                f"--run {args.run}: no config.yaml there; --run takes the --out directory of "
                "an `rlvr train` run"
            )
        if not (run / "checkpoint" / "policy").is_dir() and args.model is None:
            raise ValueError(
                f"--run {args.run}: no checkpoint/policy there (the run has not saved a good "
                "checkpoint yet); wait for one, or give --model with another checkpoint's "
                "policy/ directory"
            )
        return run
    if args.model is None:
        return None
    policy = Path(args.model)
    run = policy.parent.parent
    named = policy.name == "policy" and policy.parent.name.startswith("checkpoint")
    return run if named and (run / "config.yaml").is_file() else None


def add_tool_arguments(parser: argparse.ArgumentParser) -> None:
    """`rlvr eval --tools on|off`."""
    parser.add_argument(
        "--tools",
        choices=("on", "off"),
        default=None,
        help="with --run: evaluate in the run's episodes, with its tools or environment "
        "(on, the default for a run that has them; tool use is reported with CIs), or in "
        "one turn without them (off: the no-tool control's view of the same checkpoint)",
    )


def run_episodes(cfg: Any, tools: str | None, run: Path) -> dict[str, Any] | None:
    """The multi-turn fields of a run's config for `evaluate_model(episodes=...)` (its
    environment or tools, and its episode budgets, which also override those of a task
    with its own environment): None for a run without them or with `--tools off`."""
    own = cfg.environment is not None or bool(cfg.tools)
    if tools is not None and not own:
        raise ValueError(
            f"--tools {tools}: the run in {run} has no tools or environment in its config"
        )
    if tools == "off" or not (own or cfg.episode):
        return None
    fields = ("environment", "environment_options", "tools", "tool_format", "episode")
    return {name: getattr(cfg, name) for name in fields}


def run_settings(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The eval settings a run's config implies; `args.run_options` and `args.model_setup`
    are set for the evaluation paths."""
    from rlvr.eval.run import ModelSetup
    from rlvr.train.config import load_yaml, resolve_config
    from rlvr.train.loop import EVAL_SEED_OFFSET

    try:
        cfg = resolve_config(load_yaml(run / "config.yaml"))
    except ValueError as err:
        raise ValueError(f"--run {run}: its config.yaml does not load: {err}") from None
    args.run_episodes = run_episodes(cfg, getattr(args, "tools", None), run)
    same_task = args.task in (None, cfg.task)
    task_options = dict(cfg.task_options) if same_task else {}
    data_given = getattr(args, "data", None) is not None
    if data_given:  # a new benchmark file: all of its rows are eval items
        task_options.pop("eval_only", None)
    policy = {k: v for k, v in cfg.policy.items() if k not in TRAINING_ONLY_POLICY}
    args.run_options = {
        # Another task's options would not fit it; the policy and sampling still do.
        "task_options": task_options,
        "policy": policy,
        "engine_options": dict(cfg.engine_options),
    }
    args.model_setup = ModelSetup(
        fp32_head=cfg.build_recipe().fp32_head,
        think_budget=cfg.think_budget,
        interrupt_phrase=cfg.interrupt_phrase,
    )
    return {
        "task": cfg.task,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "samples": cfg.eval_samples,
        "size": 0 if data_given else cfg.eval_size,  # a new --data file: every row
        "seed": cfg.seed + EVAL_SEED_OFFSET,  # the seed of the run's own evaluations
        "engine": cfg.rollout_engine,
    }
