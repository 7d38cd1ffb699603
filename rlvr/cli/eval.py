"""`rlvr eval`: a policy on a task split; `--run` evaluates a run's checkpoint as it was
trained (`eval_run`), `--k`/`--data` the pass@k evaluation of any model (`eval_k`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rlvr.cli.common import fail, task_help
from rlvr.cli.eval_table import render


def cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.cli.eval_k import cmd_eval_k, wants_k
    from rlvr.cli.eval_run import resolve_eval_args

    try:
        resolve_eval_args(args)  # --run (or a run's checkpoint as --model): its settings
    except ValueError as err:
        return fail(str(err))
    if wants_k(args):  # --k / --data: pass@k evaluation of any model and task
        return cmd_eval_k(args)
    from dataclasses import replace

    from rlvr.eval.run import ModelSetup, evaluate_model

    bars = []

    def progress(problems: int, samples: int):
        bars.append(eval_progress(problems, samples))
        return bars[-1].update

    try:
        options = eval_options(args.set, getattr(args, "run_options", None))
        setup = replace(
            getattr(args, "model_setup", None) or ModelSetup(),
            model=args.model,
            policy=options["policy"],
            engine=args.engine,
            engine_options=options["engine_options"],
        )
        metrics = evaluate_model(
            setup,
            args.task,
            options["task_options"],
            split=args.split,
            size=args.size,
            samples=args.samples,
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            episodes=getattr(args, "run_episodes", None),
            progress=progress,
        )
    except (ValueError, OSError, ImportError) as err:
        return fail(str(err))
    for bar in bars:
        bar.close(f"accuracy {metrics['eval/accuracy']:.3f}")
    print(render(metrics, args.json))
    return 0


def eval_progress(problems: int, samples: int):
    """The progress of an evaluation of `problems` (`rlvr.runlog.progress.Progress`): a
    bar on a terminal, lines with an ETA elsewhere."""
    from rlvr.runlog.progress import Progress

    each = f"{samples} samples each, and greedy" if samples > 1 else "one sample and greedy"
    return Progress(f"rlvr eval ({each})", problems, unit="problem")


def eval_options(sets: Sequence[str], base: dict | None = None) -> dict:
    """`task_options`, `policy` and `engine_options` of `rlvr eval`: `base` (a run's, with
    --run) with `--set KEY=VALUE` applied over it; a bare KEY (or `task_options.KEY`, the
    train spelling) is a task option, anything that is not one is rejected later by name."""
    from rlvr.train.config import apply_override

    options: dict = {}
    for assignment in sets:
        apply_override(options, assignment)
    base = base or {}
    merged = {}
    for name in ("task_options", "policy", "engine_options"):
        given = options.pop(name, {})
        if not isinstance(given, dict):
            raise ValueError(f"--set {name} expects {name}.KEY=VALUE, got {given!r}")
        merged[name] = {**base.get(name, {}), **given}
    merged["task_options"].update(options)
    return merged


def add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a policy on a task split")
    p.add_argument(
        "--run",
        metavar="RUN_DIR",
        help="evaluate the run's newest checkpoint (RUN_DIR/checkpoint/policy) with the run's "
        "own task, task options (template, data, fields), policy options (chat template), "
        "response budget, sampling settings, eval size, samples and seed, from its "
        "config.yaml; the flags below override them",
    )
    p.add_argument(
        "--model",
        help="'embedded' (default), a checkpoint's policy/ dir, or a hub id; a checkpoint "
        "inside a run directory is evaluated with the run's settings, as with --run",
    )
    p.add_argument("--task", help=task_help() + " (default: arithmetic, or the run's)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task option, e.g. --set digits=3 or --set task_options.digits=3, or "
        "policy.KEY / engine_options.KEY (repeatable); must match the options the model "
        "was trained with (--run sets them from the run)",
    )
    p.add_argument("--split", default="eval", help="train, dev or eval")
    p.add_argument(
        "--size", type=int, default=None, help="first N problems, N ≥ 1 (0: all; default: 0)"
    )
    p.add_argument(
        "--samples", type=int, default=None, help="samples per problem (avg@k, pass@k; default 1)"
    )
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (1)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="response budget in tokens (default: the run's, or the task's, which fits its "
        "answers)",
    )
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: 0)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the metrics as one JSON object (default: a table of metric, value, "
        "95%% interval and n)",
    )
    from rlvr.cli.eval_k import add_k_arguments
    from rlvr.cli.eval_run import add_tool_arguments

    add_k_arguments(p)
    add_tool_arguments(p)
    p.set_defaults(func=cmd_eval)
