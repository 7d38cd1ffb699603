"""Final answers of math word problems: GSM8K numbers, AIME integers, MATH expressions.

Each ``check_*`` takes a completion and the reference answer and returns a ``Verdict``;
it may raise or run long on hostile input, which is why callers go through
``rlvr.verify.check`` (time limit, exceptions become verdicts). Only the last
``TAIL_CHARS`` characters of a completion are read: the final answer is at the end, and
a long chain of thought must not hide it or make extraction slow.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from rlvr.verify.extract import extract_boxed
from rlvr.verify.verdict import Verdict

TAIL_CHARS = 4_000
"""Characters at the end of a completion in which the final answer is looked for."""
MAX_ANSWER_CHARS = 300
"""A longer extracted answer is not parsed (it is not a final answer, and sympy can hang)."""

_HASH_LINE = re.compile(r"^[ \t]*####[ \t]*(.+?)[ \t]*$", re.MULTILINE)
# A number with optional thousands separators, then optional unit words or a percent sign.
_NUMBER = re.compile(
    r"(?P<sign>[-+]?)(?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?P<frac>\.[0-9]+)?(?P<unit>\s*%|(?:\s*[A-Za-z][A-Za-z .'/-]*)?)"
)
_LATEX_NOISE = (
    (re.compile(r"\\text\{([^{}]*)\}|\\textbf\{([^{}]*)\}|\\mathrm\{([^{}]*)\}"), r"\1\2\3"),
    (re.compile(r"\\[,!;: ]|~"), ""),  # LaTeX spaces
    (re.compile(r"\{,\}"), ","),  # 1{,}000
    (re.compile(r"\\?\$|\\%"), lambda m: "%" if m.group(0) == "\\%" else ""),
    (re.compile(r"\\(?:left|right)\b"), ""),
)


def tail(text: str, chars: int = TAIL_CHARS) -> str:
    """The last ``chars`` characters of ``text`` ('' for a non-string)."""
    return text[-chars:] if isinstance(text, str) else ""


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` in the tail of ``text``."""
    window = tail(text)
    return extract_boxed(window, max_chars=len(window))


def strip_latex(text: str) -> str:
    """``\\$1{,}000\\text{ dollars}`` → ``1,000 dollars``: wrappers and spacing removed."""
    for pattern, replacement in _LATEX_NOISE:
        text = pattern.sub(replacement, text)
    return text.replace("\u2212", "-").strip()


def parse_number(text: str) -> Decimal | None:
    """The number an answer states, ignoring ``$``, thousands separators, a trailing
    ``%`` or unit words and a leading ``=``; None if it is not one plain number.

    ``"$1,000.00"`` → 1000.00, ``"18 dollars"`` → 18, ``"25%"`` → 25, ``"3+4"`` → None.
    """
    text = strip_latex(text).lstrip("=").strip().rstrip(".")
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    digits = match["sign"] + match["int"].replace(",", "") + (match["frac"] or "")
    try:
        return Decimal(digits)
    except InvalidOperation:
        return None


def gsm8k_answer(completion: str) -> str | None:
    """The last ``\\boxed{}``; else the last ``#### N`` line."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    lines = _HASH_LINE.findall(tail(completion))
    return lines[-1] if lines else None


def gsm8k_gold(solution: str) -> str:
    """The reference number of a GSM8K solution (its ``#### N`` line), or the text itself."""
    lines = _HASH_LINE.findall(solution)
    return lines[-1].strip() if lines else solution.strip()


def check_gsm8k(completion: str, reference: str) -> Verdict:
    """Numeric match of the final answer with the reference, e.g. ``1,000.0`` = ``1000``."""
    extracted = gsm8k_answer(completion)
    if extracted is None:
        return Verdict(False, False, None, reason="no \\boxed{...} or '#### N' answer found")
    expected = parse_number(gsm8k_gold(reference))
    if expected is None:
        raise ValueError(f"reference answer {reference!r} is not a number")
    value = parse_number(extracted[:MAX_ANSWER_CHARS])
    if value is None:
        return Verdict(False, False, extracted, reason="answer is not a single number")
    correct = value == expected
    reason = "correct" if correct else f"expected {expected}, got {value}"
    return Verdict(correct, True, extracted, reason=reason)


_AIME = re.compile(r"[0-9]{1,6}")


def aime_integer(text: str) -> int | None:
    """An AIME answer: an integer 0–999 written with digits only (leading zeros allowed)."""
    cleaned = strip_latex(text).strip()
    if not _AIME.fullmatch(cleaned):
        return None
    value = int(cleaned)
    return value if value <= 999 else None


def check_aime(completion: str, reference: str) -> Verdict:
    """The last ``\\boxed{}`` as an integer 0–999, equal to the reference (``033`` = 33)."""
    expected = aime_integer(str(reference))
    if expected is None:
        raise ValueError(f"reference answer {reference!r} is not an integer from 0 to 999")
    extracted = last_boxed(completion)
    if extracted is None:
        return Verdict(False, False, None, reason="no \\boxed{...} answer found")
    value = aime_integer(extracted[:MAX_ANSWER_CHARS])
    if value is None:
        return Verdict(False, False, extracted, reason="answer is not an integer from 0 to 999")
    correct = value == expected
    reason = "correct" if correct else f"expected {expected}, got {value}"
    return Verdict(correct, True, extracted, reason=reason)


_LAST_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def check_last_number(completion: str, reference: str) -> Verdict:
    """The last number written anywhere in the completion, equal to the reference: the
    lenient extraction of lm-evaluation-harness's GSM8K "flexible-extract" filter, for a
    small chat model that answers in its own words ("2 + 9 = 11.") and never boxes."""
    expected = parse_number(gsm8k_gold(reference))
    if expected is None:
        raise ValueError(f"reference answer {reference!r} is not a number")
    numbers = _LAST_NUMBER.findall(tail(completion))
    if not numbers:
        return Verdict(False, False, None, reason="no number in the completion")
    extracted = numbers[-1].replace(",", "")
    correct = Decimal(extracted) == expected
    reason = "correct" if correct else f"expected {expected}, got {extracted}"
    return Verdict(correct, True, extracted, reason=reason)
