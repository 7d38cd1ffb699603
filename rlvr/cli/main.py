"""Command line: `rlvr train | eval | compare | audit | recipes | evalsize | show | new`, one
module per subcommand; `main` builds the parser and dispatches."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rlvr.cli.audit import add_audit_parser
from rlvr.cli.compare import add_compare_parser
from rlvr.cli.eval import add_eval_parser
from rlvr.cli.evalsize import add_evalsize_parser
from rlvr.cli.new import add_new_parser
from rlvr.cli.recipes import add_recipes_parser
from rlvr.cli.show import add_show_parser
from rlvr.cli.train import add_train_parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `rlvr train`'s config flags (which import the training config) are
    added only when `command` is "train" or None (every command)."""
    parser = argparse.ArgumentParser(prog="rlvr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_recipes_parser(sub)
    add_train_parser(sub, config_flags=command in (None, "train"))
    add_eval_parser(sub)
    add_audit_parser(sub)
    add_compare_parser(sub)
    add_evalsize_parser(sub)
    add_show_parser(sub)
    add_new_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    added = importable_here()
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except BrokenPipeError:  # `rlvr ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if added in sys.path:  # main called in-process (tests, notebooks) leaves no trace
            sys.path.remove(added)


def importable_here() -> str | None:
    """Modules in the current directory are importable (`environment: my_envs:Game`,
    `reward_funcs: [my_rewards:brevity]`), as under `python -m rlvr`: the `rlvr` script's
    own sys.path starts at its bin directory. Spawned workers (`rlvr compare --jobs`)
    inherit the path. Returns the directory added (None: it was there)."""
    here = os.getcwd()
    if "" in sys.path or here in sys.path:
        return None
    sys.path.insert(0, here)
    return here


if __name__ == "__main__":
    sys.exit(main())
