"""`rlvr compare --items A B [--score S]`: two `rlvr eval --items` files, item by item.

Heavy imports happen inside the functions, so building the CLI parser stays fast."""

from __future__ import annotations

import argparse

from rlvr.cli.common import fail


def add_items_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the item-by-item mode, added to `rlvr compare` after all of its
    matrix options, whose defaults it records to tell which of them were given."""
    matrix = {a.dest: a.default for a in parser._actions if a.dest not in ("help", "func")}
    parser.set_defaults(matrix_defaults=matrix)
    group = parser.add_argument_group(
        "item by item (instead of a matrix): two `rlvr eval --k K --items FILE` files"
    )
    group.add_argument(
        "--items",
        nargs=2,
        metavar=("A", "B"),
        help="compare model A's items file with model B's: Δ = A − B with a paired "
        "bootstrap CI, and an exact sign test over the items",
    )
    group.add_argument(
        "--score", help="per-item score compared: avg (default), maj or pass@j, e.g. pass@4"
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def cmd_compare_items(args: argparse.Namespace) -> int:
    from rlvr.eval.paired import ItemsError, format_paired, paired_items

    if args.items is None:
        return fail("--score applies to --items A B (two `rlvr eval --items` files) only")
    given = [_flag(k) for k, unset in args.matrix_defaults.items() if getattr(args, k) != unset]
    if given:
        kind = "is an option" if len(given) == 1 else "are options"
        return fail(
            f"--items compares two `rlvr eval --items` files and takes only --score; "
            f"{', '.join(given)} {kind} of a matrix comparison (drop them, or drop --items)"
        )
    a, b = args.items
    try:
        result = paired_items(a, b, args.score or "avg")
    except ItemsError as err:
        return fail(str(err))
    print(format_paired(result, a, b))
    return 0
