"""`rlvr eval --k K [--data FILE]`: the pass@k evaluation of any model on any task.

Heavy imports happen inside the functions, so building the CLI parser stays fast."""

from __future__ import annotations

import argparse
import copy
from typing import Any

from rlvr.cli.common import fail
from rlvr.cli.eval_table import render


def add_k_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the pass@k evaluation, added to `rlvr eval`."""
    parser.add_argument("--k", type=int, help="samples per item: avg@k, pass@k, maj@k with CIs")
    parser.add_argument(
        "--data", help="JSONL/JSON/Parquet file of the task (every row is evaluated)"
    )
    parser.add_argument(
        "--items", help="with --k: write one JSONL line per item (samples and verdicts) here"
    )
    parser.add_argument(
        "--top-p", type=float, default=None, help="nucleus sampling (default: 1, or the run's)"
    )
    parser.add_argument(
        "--engine", default=None, choices=("hf", "vllm"), help="rollout engine (default: hf)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per generate call")


def wants_k(args: argparse.Namespace) -> bool:
    return getattr(args, "k", None) is not None or getattr(args, "data", None) is not None


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The run's options (`rlvr eval --run`, else none) with `--set` applied over them."""
    from rlvr.tasks import task_options
    from rlvr.train.config import apply_override

    options: dict[str, Any] = copy.deepcopy(getattr(args, "run_options", None) or {})
    for assignment in args.set:
        apply_override(options, assignment)
    unknown = sorted(set(options) - {"task_options", "policy", "engine_options"})
    if unknown:
        raise ValueError(
            f"--set {unknown[0]}=...: rlvr eval --k takes task_options.*, policy.* and "
            "engine_options.* keys"
        )
    task_opts = dict(options.get("task_options", {}))
    if args.data is not None:
        task_opts["data"] = args.data
        if "eval_only" in task_options(args.task):
            task_opts.setdefault("eval_only", True)  # the file is the benchmark: score all rows
    return {**options, "task_options": task_opts}


def evaluate_from_args(args: argparse.Namespace) -> dict[str, float]:
    """Load the model and task the arguments name and run `evaluate_k`."""
    from dataclasses import replace

    from rlvr.eval import run as eval_run
    from rlvr.eval.bench import KSettings, evaluate_k

    options = _options(args)
    setup = replace(
        getattr(args, "model_setup", None) or eval_run.ModelSetup(),
        model=args.model,
        policy=options.get("policy", {}),
        engine=args.engine,
        engine_options=options.get("engine_options", {}),
    )
    task, engine, problems, budget = eval_run.prepare_eval(
        setup,
        args.task,
        options["task_options"],
        getattr(args, "run_episodes", None),  # a run's tools (--run)
        args.split,
        args.size,
        args.max_new_tokens,
    )
    from rlvr.runlog.progress import Progress

    k = args.k if args.k is not None else args.samples
    settings = KSettings(k, args.temperature, args.top_p, budget, args.seed, args.batch_size)
    bar = Progress(f"rlvr eval --k {k}", len(problems), unit="problem")
    metrics = evaluate_k(engine, task, problems, settings, args.items, progress=bar.update)
    bar.close(f"wrote {args.items}" if args.items else "")
    return metrics


def cmd_eval_k(args: argparse.Namespace) -> int:
    try:
        metrics = evaluate_from_args(args)
    except (ValueError, OSError, ImportError) as err:
        return fail(str(err))
    print(render(metrics, args.json))
    return 0
