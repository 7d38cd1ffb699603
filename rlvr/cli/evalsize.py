"""`rlvr evalsize`: how many eval items resolve an accuracy difference."""

from __future__ import annotations

import argparse

from rlvr.cli.common import fail


def cmd_evalsize(args: argparse.Namespace) -> int:
    from rlvr.eval.significance import evalsize_text

    try:
        print(evalsize_text(args.baseline, args.delta, args.power, args.alpha))
    except ValueError as err:
        return fail(str(err))
    return 0


def add_evalsize_parser(sub) -> None:
    p = sub.add_parser("evalsize", help="eval items needed to resolve an accuracy difference")
    p.add_argument("--baseline", type=float, required=True, help="baseline accuracy, in (0, 1)")
    p.add_argument("--delta", type=float, required=True, help="difference to resolve")
    p.add_argument("--power", type=float, default=0.8, help="probability of detecting it")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level")
    p.set_defaults(func=cmd_evalsize)
