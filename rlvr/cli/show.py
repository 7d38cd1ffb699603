"""`rlvr show RUN | ITEMS.jsonl | A.jsonl B.jsonl`: the arguments and the command.

Heavy imports happen inside the functions, so building the CLI parser stays fast."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from rlvr.cli.common import fail

DEFAULT_ROWS = {"run": 4, "items": 10, "diff": 5, "comparison": 0}


def add_show_parser(sub) -> None:
    p = sub.add_parser(
        "show",
        help="a run's config, newest metrics and completions (terminal or --html page); "
        "a comparison's cells and their curves; an `rlvr eval --items` file; two items "
        "files side by side",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a run directory, an `rlvr compare --matrix` directory (its cells), an `rlvr "
        "eval --items` file, or two items files A B (items won and lost by A, side by "
        "side); the kind is told by content",
    )
    p.add_argument("--step", type=int, help="a run's completions at this step (default: newest)")
    p.add_argument(
        "--rows",
        type=int,
        help="completions (run: 4), items (items file: 10) or items won and lost (two "
        "files: 5 each) shown in the terminal",
    )
    p.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="PATH",
        help="write one self-contained HTML page instead (default: RUN/show.html or "
        "CMP/show.html, ITEMS.html beside an items file, A-vs-B.html beside A)",
    )
    p.add_argument(
        "--no-color",
        action="store_true",
        help="bracket markers (⟦obs: …⟧) instead of colours, as when not writing to a terminal",
    )
    p.add_argument("--score", help="two items files: avg (default), maj or pass@j, e.g. pass@4")
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    from rlvr.show.load import ShowError

    try:
        kind = _kind(args)
        _check_options(args, kind)
        if args.html is not None:
            path, what = _write_html(args, kind)
            print(f"wrote {path} ({what})")
        else:
            print(_text(args, kind))
    except ShowError as err:
        return fail(str(err))
    except BrokenPipeError:  # `rlvr show RUN | head`: rlvr.cli.main.main handles it
        raise
    except OSError as err:
        return fail(f"cannot write {err.filename}: {err.strerror}")
    return 0


def _kind(args: argparse.Namespace) -> str:
    from rlvr.show.load import ShowError, detect_kind

    kinds = [detect_kind(p) for p in args.paths]
    if len(kinds) == 1:
        return kinds[0]
    if len(kinds) == 2 and kinds == ["items", "items"]:
        return "diff"
    raise ShowError(
        f"rlvr show takes one run or comparison directory, one items file, or two items "
        f"files A B; got "
        f"{len(kinds)} paths ({', '.join(kinds)})"
    )


def _check_options(args: argparse.Namespace, kind: str) -> None:
    from rlvr.show.load import ShowError

    if args.step is not None and kind != "run":
        raise ShowError(f"--step applies to a run directory, not to {_describe(kind)}")
    if args.score is not None and kind != "diff":
        raise ShowError(f"--score applies to two items files A B, not to {_describe(kind)}")
    if args.rows is not None and kind == "comparison":
        raise ShowError(
            "--rows applies to rows of completions or items; a comparison lists every cell"
        )
    if args.rows is not None and args.rows < 1:
        raise ShowError(f"--rows must be an integer ≥ 1, got {args.rows}")
    if args.rows is not None and args.html is not None:
        raise ShowError("--rows sets the terminal view; the --html page holds every row")
    if args.no_color and args.html is not None:
        raise ShowError("--no-color sets the terminal view; the --html page has its own colours")


def _describe(kind: str) -> str:
    names = {"run": "a run", "items": "an items file", "diff": "two items files"}
    return names.get(kind, "a comparison")


def use_color(no_color: bool) -> bool:
    """Colours when writing to a terminal, unless --no-color or NO_COLOR (no-color.org)."""
    return not no_color and not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def _text(args: argparse.Namespace, kind: str) -> str:
    rows = args.rows or DEFAULT_ROWS[kind]
    color = use_color(args.no_color)
    if kind == "run":
        from rlvr.show.load import load_run
        from rlvr.show.text import run_text

        return run_text(load_run(args.paths[0]), args.step, rows, color)
    if kind == "comparison":
        from rlvr.show.comparison import comparison_text, load_comparison

        return comparison_text(load_comparison(args.paths[0]))
    from rlvr.show.items import diff_text, items_text, load_diff, load_items

    if kind == "items":
        return items_text(load_items(args.paths[0]), rows, color)
    width = min(shutil.get_terminal_size((120, 40)).columns, 160)
    return diff_text(load_diff(*args.paths, score=args.score or "avg"), rows, color, width)


def _write_html(args: argparse.Namespace, kind: str) -> tuple[Path, str]:
    from rlvr.show import html_items, html_run

    first = Path(args.paths[0])
    if kind == "run":
        from rlvr.show.load import load_run

        run = load_run(first)
        path = Path(args.html) if args.html else run.path / "show.html"
        return path, html_run.write_run_page(run, path, args.step)
    if kind == "comparison":
        from rlvr.show.comparison import load_comparison, write_comparison_page

        path = Path(args.html) if args.html else first / "show.html"
        return path, write_comparison_page(load_comparison(first), path)
    if kind == "items":
        path = Path(args.html) if args.html else first.with_suffix(".html")
        return path, html_items.write_items_page(str(first), path)
    second = Path(args.paths[1])
    default = first.with_name(f"{first.stem}-vs-{second.stem}.html")
    path = Path(args.html) if args.html else default
    return path, html_items.write_diff_page(str(first), str(second), path, args.score or "avg")
