"""MATH-style answers compared by symbolic equivalence with math-verify.

The last ``\\boxed{}`` of the completion and the reference are both parsed by
math-verify (LaTeX first, then plain expressions) and compared with its ``verify``:
``\\frac{1}{2}`` = ``0.5`` = ``\\dfrac12``, ``[1,3)`` ≠ ``(1,3)``, ``\\{1,2\\}`` =
``\\{2,1\\}``, ``30^\\circ`` = ``30``, ``\\text{(C)}`` = ``C``. math-verify's own
time-outs are turned off (they use ``signal.alarm`` and fail off the main thread);
``rlvr.verify.check`` applies its own limit around the whole check.
"""

from __future__ import annotations

import logging

from rlvr.verify.extract import extract_final_line
from rlvr.verify.math_answers import MAX_ANSWER_CHARS, last_boxed, tail
from rlvr.verify.verdict import Verdict


def _parse(latex: str) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return parse(f"$\\boxed{{{latex}}}$", extraction_config=config, parsing_timeout=None)


def _quiet() -> None:
    # math-verify warns once per process that its time-outs are off; that is intended here.
    for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


_warm = False


def warm_up() -> None:
    """Import math-verify and build its parsers, outside any time limit: an alarm that
    lands in a half-finished import leaves math-verify broken for the whole process."""
    global _warm
    if _warm:
        return
    try:
        from math_verify import verify
    except ImportError as error:
        raise ImportError(
            "the 'math' verifier needs math-verify: pip install 'rlvr[hf]'"
        ) from error
    _quiet()
    verify(_parse("\\frac{1}{2}"), _parse("0.5"), timeout_seconds=None)
    _warm = True


def check_math(completion: str, reference: str) -> Verdict:
    """The last ``\\boxed{}`` is symbolically equal to ``reference`` (see the module doc)."""
    extracted = last_boxed(completion)
    if extracted is None:
        return Verdict(False, False, None, reason="no \\boxed{...} answer found")
    return _compare(extracted, reference, "boxed answer")


def dapo_answer(completion: str) -> str | None:
    """DAPO-Math-17k's answer: the last line ``Answer: X`` (the format its prompts ask
    for, as DAPO's own scorer reads it), else the last ``\\boxed{}``. A boxed or
    ``$...$``-wrapped ``X`` is unwrapped: ``Answer: $\\boxed{7}$`` gives ``7``."""
    line = extract_final_line(tail(completion), "Answer:")
    if line is None:
        return last_boxed(completion)
    line = line.strip().strip("$").strip()
    return last_boxed(line) or line.rstrip(".").strip() or None


def check_dapo_math(completion: str, reference: str) -> Verdict:
    """`dapo_answer` is symbolically equal to ``reference`` (math-verify, as ``math``)."""
    extracted = dapo_answer(completion)
    if extracted is None:
        return Verdict(False, False, None, reason="no 'Answer: ...' line or \\boxed{...} found")
    return _compare(extracted, reference, "answer")


def _compare(extracted: str, reference: str, what: str) -> Verdict:
    from math_verify import verify

    warm_up()
    if not extracted or len(extracted) > MAX_ANSWER_CHARS:
        return Verdict(False, False, extracted, reason=f"{what} is empty or too long")
    gold = _parse(str(reference))
    if not gold:
        raise ValueError(f"reference answer {reference!r} could not be parsed")
    predicted = _parse(extracted)
    if not predicted:
        return Verdict(False, False, extracted, reason="answer could not be parsed")
    correct = bool(verify(gold, predicted, timeout_seconds=None))
    reason = "correct" if correct else f"expected {reference}, got {extracted}"
    return Verdict(correct, True, extracted, reason=reason)
