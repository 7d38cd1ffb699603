"""`rlvr compare`: a recipes × overrides × seeds matrix run and reported, finished studies
judged together (`--holm`), or two `rlvr eval --items` files item by item (`compare_items`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from rlvr.cli.common import fail, task_help


def cmd_compare(args: argparse.Namespace) -> int:
    from rlvr.compare import build_report, run_matrix, spec_from_options
    from rlvr.compare.matrix import load_spec, parse_seeds
    from rlvr.train.config import load_yaml
    from rlvr.train.run import RunInterrupted

    if args.items is not None or args.score is not None:  # two `rlvr eval --items` files
        from rlvr.cli.compare_items import cmd_compare_items

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
            return fail(f"--holm only reads finished comparison directories; drop {flags}")
        try:
            print(study_set_report(args.holm))
        except ValueError as err:
            return fail(str(err))
        return 0
    if args.out is None:
        return fail(
            "--out is required: the comparison directory (or --items A B to compare two "
            "`rlvr eval --items` files item by item)"
        )
    if not args.out.strip():
        return fail("--out must name the comparison directory, got an empty string")
    if args.predict is not None and not 0 < args.predict < 1:
        return fail(
            f"--predict must be a fraction in (0, 1) of each run's compute, got {args.predict}"
        )
    sigterm_interrupts()
    out = Path(args.out)
    try:
        matrix = load_yaml(args.matrix) if args.matrix else None
        resume = not (args.matrix or args.config or args.recipes)
        if resume and not (out / "matrix.yaml").is_file():
            return fail(
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
        return fail(str(err))
    except OSError as err:
        where = f" ({err.filename})" if err.filename else ""
        return fail(f"cannot write the comparison to --out {args.out}: {err.strerror}{where}")
    for warning in report.warnings:
        print(f"rlvr: warning: {warning}", file=sys.stderr)
    took = f" ({len(run.ran)} cells run in {run.seconds:.0f} s)" if run is not None else ""
    print(f"wrote {report.path}, {out / 'results.csv'} and {len(report.plots)} plots{took}")
    return 1 if run is not None and run.failed else 0


def sigterm_interrupts() -> None:
    """SIGTERM stops `rlvr compare` as Ctrl-C does (checkpoint, record, exit 130)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def add_compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="run a recipes × overrides × seeds matrix and report, or compare two "
        "`rlvr eval --items` files item by item (--items A B)",
    )
    p.add_argument("--matrix", help="matrix YAML: base, recipes, overrides, seeds, budget")
    p.add_argument("--config", help="training config YAML used as the base of every cell")
    p.add_argument("--recipes", help="comma-separated recipes, e.g. grpo,dapo,gspo")
    p.add_argument("--seeds", help="a count (3 → seeds 0,1,2) or a list (0,4,7)")
    p.add_argument("--task", help=task_help())
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
    from rlvr.cli.compare_items import add_items_arguments

    add_items_arguments(p)
    p.set_defaults(func=cmd_compare)
