"""Command line: `rlvr train | eval | compare | audit | recipes | show`. Only this module parses arguments."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from rlvr.algo.recipes import RECIPES, recipe_fields
from rlvr.recipe_table import RECIPE_COLUMNS, recipe_row


def format_table(rows: list[dict[str, str]], columns: Sequence[str]) -> str:
    """A plain-text table with aligned columns."""
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    line = lambda r: "  ".join(r[c].ljust(widths[c]) for c in columns).rstrip()  # noqa: E731
    header = {c: c for c in columns}
    rule = {c: "-" * widths[c] for c in columns}
    return "\n".join(line(r) for r in [header, rule, *rows])


def cmd_recipes(args: argparse.Namespace) -> int:
    rows = [recipe_row(r) for r in RECIPES.values()]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    print(format_table(rows, ("recipe", *RECIPE_COLUMNS, "source")))
    if args.fields:
        print("\nFields (override any with --set FIELD=VALUE):")
        for name, doc in recipe_fields().items():
            print(f"  {name:22} {doc}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from rlvr.audit import AuditInputError, format_audit, load_batch_json, run_audit

    try:
        text = sys.stdin.read() if args.batch == "-" else Path(args.batch).read_text()
    except OSError as err:
        return _fail(f"batch: cannot read {args.batch!r}: {err.strerror}")
    try:
        data = load_batch_json(text)
    except AuditInputError as err:
        return _fail(str(err))
    if args.recipe and isinstance(data, dict):
        data["recipe"] = args.recipe
    try:
        result = run_audit(data)
    except AuditInputError as err:
        return _fail(str(err))
    print(format_audit(result) if args.table else json.dumps(result, indent=1))
    return 0


def _print_config_help() -> int:
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


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.train import resolve_config
    from rlvr.train.config import load_yaml
    from rlvr.train.run import resume_config

    if args.help_config:
        return _print_config_help()
    if args.resume is not None and args.overwrite:
        return _fail("--resume and --overwrite exclude each other")
    explicit = config_values(args)
    fixed = [k for k in ("recipe", "task", "model") if explicit.get(k) is not None]
    if args.resume is not None and (args.config or fixed):
        return _fail(
            "--resume continues the run as recorded in its config.yaml; --config, --recipe, "
            "--task and --model cannot change it"
        )
    out = explicit.get("out")
    if args.resume is not None and out is not None and out != args.resume:
        return _fail(f"--resume {args.resume} and --out {out} name different directories")
    try:
        if args.resume is not None:
            cfg = resume_config(args.resume, args.set, **explicit)
        else:
            base = load_yaml(args.config) if args.config else {}
            cfg = resolve_config(base, args.set, **explicit)
    except ValueError as err:
        return _fail(str(err))
    mode = "resume" if args.resume is not None else "overwrite" if args.overwrite else "new"
    return _train(cfg, mode)


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
        return _fail(f"{err} (set RLVR_DEBUG=1 for the traceback)")
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


def cmd_compare(args: argparse.Namespace) -> int:
    from rlvr.compare import build_report, run_matrix, spec_from_options
    from rlvr.compare.matrix import load_spec, parse_seeds
    from rlvr.train.config import load_yaml
    from rlvr.train.run import RunInterrupted

    if args.items is not None or args.score is not None:  # two `rlvr eval --items` files
        from rlvr.cli_compare_items import cmd_compare_items

        return cmd_compare_items(args)
    if args.holm:  # a set of finished studies, Holm-corrected together
        from rlvr.compare.report import study_set_report

        given = [
            k
            for k, unset in args.matrix_defaults.items()
            if k != "holm" and getattr(args, k) != unset
        ]
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            return _fail(f"--holm only reads finished comparison directories; drop {flags}")
        try:
            print(study_set_report(args.holm))
        except ValueError as err:
            return _fail(str(err))
        return 0
    if args.out is None:
        return _fail(
            "--out is required: the comparison directory (or --items A B to compare two "
            "`rlvr eval --items` files item by item)"
        )
    if not args.out.strip():
        return _fail("--out must name the comparison directory, got an empty string")
    if args.predict is not None and not 0 < args.predict < 1:
        return _fail(
            f"--predict must be a fraction in (0, 1) of each run's compute, got {args.predict}"
        )
    _sigterm_interrupts()
    out = Path(args.out)
    try:
        matrix = load_yaml(args.matrix) if args.matrix else None
        resume = not (args.matrix or args.config or args.recipes)
        if resume and not (out / "matrix.yaml").is_file():
            return _fail(
                f"--out {args.out} holds no comparison (no matrix.yaml); to start one give "
                f"--recipes, --matrix or --config"
            )
        if resume:  # `rlvr compare --out DIR` resumes DIR
            matrix = load_spec(out / "matrix.yaml").to_dict()
        spec = spec_from_options(
            matrix=matrix,
            train_config=load_yaml(args.config) if args.config else None,
            sets=[*args.set, *([f"task={args.task}"] if args.task else [])],
            recipes=args.recipes.split(",") if args.recipes else None,
            seeds=parse_seeds(args.seeds) if args.seeds else None,
            budget_mode=args.budget,
            steps=args.steps,
            tokens=args.tokens,
            updates=args.updates,
            baseline=args.baseline,
        )
        run = None
        if not args.report_only:
            jobs = 1 if args.jobs is None else args.jobs
            run = run_matrix(spec, out, jobs=jobs, argv=getattr(args, "argv", None))
        report = build_report(spec, out, args.predict, args.predict_compute)
    except (RunInterrupted, KeyboardInterrupt):
        print(
            f"rlvr: compare interrupted; finished cells are kept and the running one "
            f"checkpointed; resume with: rlvr compare --out {shlex.quote(args.out)}",
            file=sys.stderr,
        )
        return 130
    except ValueError as err:
        return _fail(str(err))
    except OSError as err:
        where = f" ({err.filename})" if err.filename else ""
        return _fail(f"cannot write the comparison to --out {args.out}: {err.strerror}{where}")
    for warning in report.warnings:
        print(f"rlvr: warning: {warning}", file=sys.stderr)
    print(f"wrote {report.path}, {out / 'results.csv'} and {len(report.plots)} plots")
    return 1 if run is not None and run.failed else 0


def _sigterm_interrupts() -> None:
    """SIGTERM stops `rlvr compare` as Ctrl-C does (checkpoint, record, exit 130)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def cmd_evalsize(args: argparse.Namespace) -> int:
    from rlvr.eval.significance import evalsize_text

    try:
        print(evalsize_text(args.baseline, args.delta, args.power, args.alpha))
    except ValueError as err:
        return _fail(str(err))
    return 0


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


def cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.cli_eval_k import cmd_eval_k, wants_k
    from rlvr.cli_eval_run import resolve_eval_args

    try:
        resolve_eval_args(args)  # --run (or a run's checkpoint as --model): its settings
    except ValueError as err:
        return _fail(str(err))
    if wants_k(args):  # --k / --data: pass@k evaluation of any model and task
        return cmd_eval_k(args)
    from dataclasses import replace

    from rlvr.eval.run import ModelSetup, evaluate_model

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
        )
    except (ValueError, OSError, ImportError) as err:
        return _fail(str(err))
    print(json.dumps(metrics, indent=1))
    return 0


def _fail(message: str) -> int:
    print(f"rlvr: error: {message}", file=sys.stderr)
    return 2


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `rlvr train`'s config flags (which import the training config) are
    added only when `command` is "train" or None (every command)."""
    parser = argparse.ArgumentParser(prog="rlvr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("recipes", help="list the named recipes and the choices they make")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--fields", action="store_true", help="also document every recipe field")
    p.set_defaults(func=cmd_recipes)
    _add_train(sub, config_flags=command in (None, "train"))
    _add_eval(sub)
    p = sub.add_parser("audit", help="loss, advantages and d loss/d logprob of a JSON batch")
    p.add_argument("batch", help="JSON file, or - for standard input")
    p.add_argument("--recipe", help="override the batch's recipe")
    p.add_argument("--table", action="store_true", help="print a readable gradient table")
    p.set_defaults(func=cmd_audit)
    _add_compare(sub)
    p = sub.add_parser("evalsize", help="eval items needed to resolve an accuracy difference")
    p.add_argument("--baseline", type=float, required=True, help="baseline accuracy, in (0, 1)")
    p.add_argument("--delta", type=float, required=True, help="difference to resolve")
    p.add_argument("--power", type=float, default=0.8, help="probability of detecting it")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level")
    p.set_defaults(func=cmd_evalsize)
    from rlvr.show.command import add_show_parser

    add_show_parser(sub)
    return parser


def _add_train(sub, config_flags: bool) -> None:
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


def _task_help() -> str:
    from rlvr.tasks import TASKS

    return f"task name: {', '.join(TASKS)}"


def _add_eval(sub) -> None:
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
    p.add_argument("--task", help=_task_help() + " (default: arithmetic, or the run's)")
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
    from rlvr.cli_eval_k import add_k_arguments
    from rlvr.cli_eval_run import add_tool_arguments

    add_k_arguments(p)
    add_tool_arguments(p)
    p.set_defaults(func=cmd_eval)


def _add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="run a recipes × overrides × seeds matrix and report, or compare two "
        "`rlvr eval --items` files item by item (--items A B)",
    )
    p.add_argument("--matrix", help="matrix YAML: base, recipes, overrides, seeds, budget")
    p.add_argument("--config", help="training config YAML used as the base of every cell")
    p.add_argument("--recipes", help="comma-separated recipes, e.g. grpo,dapo,gspo")
    p.add_argument("--seeds", help="a count (3 → seeds 0,1,2) or a list (0,4,7)")
    p.add_argument("--task", help=_task_help())
    p.add_argument("--budget", choices=("steps", "tokens", "updates"), help="equal-budget mode")
    p.add_argument("--steps", type=int, help="training steps per cell (tokens budget: the cap)")
    p.add_argument("--tokens", type=int, help="generated tokens per cell (budget tokens)")
    p.add_argument("--updates", type=int, help="optimizer updates per cell (budget updates)")
    p.add_argument("--baseline", help="label the others are compared against (default: first)")
    p.add_argument("--jobs", type=int, help="cells run in parallel processes (default: 1)")
    p.add_argument("--out", help="output directory; finished cells are never redone")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a base config field for every cell (repeatable)",
    )
    p.add_argument(
        "--report-only", action="store_true", help="rebuild the report from finished cells"
    )
    p.add_argument(
        "--predict",
        type=float,
        metavar="FRACTION",
        help="also fit each condition's sigmoid on the first FRACTION of its compute and "
        "report how well it predicts the rest (e.g. 0.5)",
    )
    p.add_argument(
        "--predict-compute",
        choices=("tokens", "seconds"),
        default="tokens",
        help="compute axis of --predict: generated tokens or rollout + train seconds",
    )
    p.add_argument(
        "--holm",
        nargs="+",
        metavar="DIR",
        help="judge the studies in these finished comparison directories together, "
        "Holm-corrected over all their predictions, and print the table",
    )
    from rlvr.cli_compare_items import add_items_arguments

    add_items_arguments(p)
    p.set_defaults(func=cmd_compare)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except BrokenPipeError:  # `rlvr ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
