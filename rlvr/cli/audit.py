"""`rlvr audit BATCH`: loss, advantages and d loss / d log-prob of every token of a JSON batch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlvr.cli.common import fail


def cmd_audit(args: argparse.Namespace) -> int:
    from rlvr.audit import AuditInputError, format_audit, load_batch_json, run_audit

    try:
        text = sys.stdin.read() if args.batch == "-" else Path(args.batch).read_text()
    except OSError as err:
        return fail(f"batch: cannot read {args.batch!r}: {err.strerror}")
    try:
        data = load_batch_json(text)
    except AuditInputError as err:
        return fail(str(err))
    if args.recipe and isinstance(data, dict):
        data["recipe"] = args.recipe
    try:
        result = run_audit(data)
    except AuditInputError as err:
        return fail(str(err))
    print(format_audit(result) if args.table else json.dumps(result, indent=1))
    return 0


def add_audit_parser(sub) -> None:
    p = sub.add_parser("audit", help="loss, advantages and d loss/d logprob of a JSON batch")
    p.add_argument("batch", help="JSON file, or - for standard input")
    p.add_argument("--recipe", help="override the batch's recipe")
    p.add_argument("--table", action="store_true", help="print a readable gradient table")
    p.set_defaults(func=cmd_audit)
