"""``check(task, completion, reference)``: the one entry point to the answer verifiers.

Verifiers are looked up by name in ``CHECKERS``; every call runs under a time limit that
works on the main thread, in other threads and in worker processes
(``rlvr.verify.timeout``). A time-out or an exception inside a verifier is a verdict
(``correct=False``, with the reason) and is counted in ``FAILURES``, never an exception
that stops a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rlvr.verify.math_answers import check_aime, check_gsm8k, check_last_number
from rlvr.verify.qa import check_exact_match
from rlvr.verify.symbolic import check_dapo_math, check_math, warm_up
from rlvr.verify.timeout import VerifierTimeout, call_with_timeout
from rlvr.verify.verdict import Verdict

Checker = Callable[[str, str], Verdict]

CHECKERS: dict[str, Checker] = {
    "gsm8k": check_gsm8k,
    "math": check_math,
    "aime": check_aime,
    "dapo_math": check_dapo_math,
    "exact_match": check_exact_match,  # short-answer QA (NQ, HotpotQA): rlvr.verify.qa
    "last_number": check_last_number,  # the last number anywhere (a chat model's own words)
}
"""Verifier name → ``fn(completion, reference) -> Verdict`` (module-level, picklable)."""

WARM_UPS: dict[str, Callable[[], None]] = {"math": warm_up, "dapo_math": warm_up}
"""One-off set-up run outside the time limit (imports that must not be interrupted)."""
DEFAULT_TIMEOUT_S = {"gsm8k": 1.0, "last_number": 1.0, "aime": 1.0, "math": 5.0, "dapo_math": 5.0}
FAILURES: Counter[str] = Counter()
"""Per process: ``"<task>/timeout"`` and ``"<task>/error"`` counts of failed checks."""


def checker(task: str) -> Checker:
    if task not in CHECKERS:
        raise ValueError(f"unknown verifier {task!r}; valid verifiers are: {', '.join(CHECKERS)}")
    return CHECKERS[task]


def check(
    task: str,
    completion: str,
    reference: str,
    *,
    timeout_s: float | None = None,
    mode: str = "auto",
) -> Verdict:
    """Verdict of ``completion`` against ``reference`` with verifier ``task`` (gsm8k,
    math, aime, dapo_math), within ``timeout_s`` seconds (default per verifier; 0: no limit)."""
    fn = checker(task)
    limit = DEFAULT_TIMEOUT_S.get(task, 1.0) if timeout_s is None else timeout_s
    if not isinstance(completion, str):
        return Verdict(False, False, None, reason=f"completion is {type(completion).__name__}")
    try:
        if task in WARM_UPS:
            WARM_UPS[task]()
        result = call_with_timeout(fn, (completion, str(reference)), limit, mode)
    except VerifierTimeout:
        FAILURES[f"{task}/timeout"] += 1
        return Verdict(False, False, None, reason=f"verifier timed out after {limit}s")
    except Exception as error:  # a crash inside a parser is a verdict, not a dead run
        FAILURES[f"{task}/error"] += 1
        return Verdict(
            False, False, None, reason=f"verifier error: {type(error).__name__}: {error}"
        )
    if not isinstance(result, Verdict):
        FAILURES[f"{task}/error"] += 1
        return Verdict(False, False, None, reason=f"verifier returned {type(result).__name__}")
    return result
