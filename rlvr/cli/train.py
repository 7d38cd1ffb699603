"""`rlvr train`: a config (YAML, --set, or one flag per scalar field) run by the one loop;
`--resume` continues a run exactly, `--overwrite` replaces one."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from rlvr.cli.common import fail


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.train import resolve_config
    from rlvr.train.config import load_yaml
    from rlvr.train.run import resume_config

    if args.help_config:
        return print_config_help()
    if args.resume is not None and args.overwrite:
        return fail("--resume and --overwrite exclude each other")
    explicit = config_values(args)
    fixed = [k for k in ("recipe", "task", "model") if explicit.get(k) is not None]
    if args.resume is not None and (args.config or fixed):
        return fail(
            "--resume continues the run as recorded in its config.yaml; --config, --recipe, "
            "--task and --model cannot change it"
        )
    out = explicit.get("out")
    if args.resume is not None and out is not None and out != args.resume:
        return fail(f"--resume {args.resume} and --out {out} name different directories")
    base: dict = {}
    try:
        if args.resume is not None:
            cfg = resume_config(args.resume, args.set, **explicit)
        else:
            base = load_yaml(args.config) if args.config else {}
            cfg = resolve_config(base, args.set, **explicit)
    except ValueError as err:
        return fail(str(err))
    if args.resume is None:
        budget_set = "max_new_tokens" in (base or {}) or "max_new_tokens" in explicit
        budget_set |= any(s.split("=")[0].strip() == "max_new_tokens" for s in args.set)
        warning = budget_warning(cfg, budget_set)
        if warning:
            print(f"rlvr: warning: {warning}", file=sys.stderr)
    mode = "resume" if args.resume is not None else "overwrite" if args.overwrite else "new"
    return _train(cfg, mode)


def budget_warning(cfg, budget_set: bool) -> str | None:
    """Why the token budget will cut most episodes short, if it will: the config attaches
    an environment or tools and leaves `max_new_tokens` at the task's one-turn default,
    which every turn and observation of an episode share (docs/agentic.md)."""
    if budget_set or not (cfg.environment or cfg.tools):
        return None
    from rlvr.parts import Episodes, build_task

    what = f"environment {cfg.environment!r}" if cfg.environment else f"tools {cfg.tools}"
    task = build_task(cfg.task, cfg.task_options, Episodes.of(cfg), build=False)
    turns = task.episode_budgets.max_turns
    return (
        f"{what} makes episodes of up to {turns} turns, but max_new_tokens is left at the "
        f"one-turn default of task {cfg.task!r} ({cfg.max_new_tokens} tokens), which all turns "
        f"and observations of an episode share: most episodes would be cut after their first "
        f"turn (env/ended_budget); set it, e.g. --set max_new_tokens={cfg.max_new_tokens * turns}"
    )


def _train(cfg, mode: str) -> int:
    from rlvr.train import run_training
    from rlvr.train.prompt_pool import PoolExhausted
    from rlvr.train.run import RunDiverged, RunInterrupted

    resume = f"rlvr train --resume {shlex.quote(cfg.out)}"
    try:
        summary = run_training(cfg, mode)
    except RunInterrupted as err:
        print(f"rlvr: {err}; resume with: {resume}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # before the run's own handlers were installed
        started = (Path(cfg.out) / "config.yaml").is_file()
        hint = f"; resume with: {resume}" if started else ""
        print(f"rlvr: interrupted before training started{hint}", file=sys.stderr)
        return 130
    except RunDiverged as err:
        print(f"rlvr: error: {err}", file=sys.stderr)
        return 1
    except (ValueError, OSError, PoolExhausted) as err:  # bad task options, model path, out dir...
        if os.environ.get("RLVR_DEBUG"):
            raise
        return fail(f"{err} (set RLVR_DEBUG=1 for the traceback)")
    if summary.get("status") == "follower":  # torchrun rank > 0: rank 0 reports the run
        return 0
    before, after = summary["initial"], summary["final"]
    print(
        f"held-out accuracy: {before['eval/accuracy']:.3f} → {after['eval/accuracy']:.3f} "
        f"(greedy {before['eval/greedy_accuracy']:.3f} → {after['eval/greedy_accuracy']:.3f}, "
        f"{len(summary['final_eval_items'])} problems); "
        f"wrote {cfg.out}/summary.json, metrics.jsonl, curves.png, checkpoint/"
    )
    return 0


def print_config_help() -> int:
    from rlvr.train.config import TrainConfig, config_docs

    defaults = TrainConfig()
    print("Training config keys (YAML or --set KEY=VALUE):")
    for name, doc in config_docs().items():
        print(f"  {name:22} {getattr(defaults, name)!s:14} {doc}")
    print("\nEvery recipe field is a config key too: see `rlvr recipes --fields`.")
    return 0


def config_values(args: argparse.Namespace) -> dict:
    """The config fields given as flags (YAML-parsed, as --set values are)."""
    from rlvr.train.config import config_flags, parse_value

    given = {}
    for name, (kind, _, _) in config_flags().items():
        value = getattr(args, name, None)
        if value is not None:
            given[name] = value if kind in ("bool", "str") else parse_value(value)
    return given


def add_train_parser(sub, config_flags: bool) -> None:
    p = sub.add_parser("train", help="train a policy with a recipe on a task")
    p.add_argument("--config", help="YAML config file (keys: see `rlvr train --help-config`)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config or recipe field, e.g. --set clip_high=0.3 "
        "or --set task_options.digits=3 (repeatable)",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR from its newest good checkpoint (exactly as if it had "
        "never stopped; --steps may extend it)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    p.add_argument(
        "--help-config",
        action="store_true",
        help="list every config key with its default and meaning, then exit",
    )
    if config_flags:
        _add_config_flags(p)
    p.set_defaults(func=cmd_train)


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per scalar `TrainConfig` field, its help the field's own doc; mappings and
    lists (task_options, policy, ...) are set with --set or a YAML file."""
    from rlvr.train.config import config_flags

    group = p.add_argument_group("config fields (each also a YAML key and a --set KEY)")
    for name, (kind, doc, default) in config_flags().items():
        flag = "--" + name.replace("_", "-")
        text = f"{doc} (default: {default})".replace("%", "%%")
        if kind == "bool":
            group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, help=text)
        else:
            group.add_argument(flag, dest=name, metavar=kind.upper(), help=text)
