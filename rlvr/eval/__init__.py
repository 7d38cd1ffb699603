"""Held-out evaluation: accuracy, format compliance and length of a policy on a task split."""

from rlvr.eval.evaluate import EvalResult, evaluate_policy

__all__ = ["EvalResult", "evaluate_policy"]
