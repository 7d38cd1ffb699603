"""Answer extraction and checking for untrusted model output: no eval, bounded work, never raises."""

from rlvr.verify.checkers import CHECKERS, check
from rlvr.verify.extract import (
    MAX_INPUT_CHARS,
    extract_boxed,
    extract_final_line,
    extract_tagged,
)
from rlvr.verify.safe_math import Evaluation, ExpressionError, evaluate
from rlvr.verify.verdict import Verdict, safe_verify

__all__ = [
    "CHECKERS",
    "MAX_INPUT_CHARS",
    "Evaluation",
    "ExpressionError",
    "Verdict",
    "check",
    "evaluate",
    "extract_boxed",
    "extract_final_line",
    "extract_tagged",
    "safe_verify",
]
