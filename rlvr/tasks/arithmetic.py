"""Multi-digit integer arithmetic: ``Q: 37+85=? A:`` answered by `` \\boxed{122}``.

The embedded model's warm-start task: every operand has exactly ``digits`` digits
(one-digit operands include 0), the operator is drawn from ``ops``, and the answer
is an integer (negative for ``-`` when the right operand is larger).

Verdict: ``formatted`` when an answer can be extracted in the expected format
(``\\boxed{...}`` or ``<answer>...</answer>``) and is an integer literal;
``correct`` when it is formatted and equals the reference. Text after the answer
is ignored, since rollouts stop at EOS anyway and a trailing ramble should not cost
the reward; when there are several answers the last complete one counts.
"""

from __future__ import annotations

import random
import re

from rlvr.checks import check_int
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict, extract_boxed, extract_tagged

ANSWER_FORMATS = ("boxed", "tagged")
_INTEGER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 18


def format_answer(answer: str, answer_format: str) -> str:
    """The answer as the model should write it, e.g. ``\\boxed{122}``."""
    return f"\\boxed{{{answer}}}" if answer_format == "boxed" else f"<answer>{answer}</answer>"


def extract_answer(completion: str, answer_format: str) -> str | None:
    """The answer in ``answer_format`` from a completion, or None."""
    return extract_boxed(completion) if answer_format == "boxed" else extract_tagged(completion)


def check_integer_answer(expected: str, completion: str, answer_format: str) -> Verdict:
    """Verdict for a completion whose answer must be the integer ``expected``."""
    extracted = extract_answer(completion, answer_format)
    if extracted is None:
        shape = format_answer("...", answer_format)
        return Verdict(False, False, None, reason=f"no {shape} answer found")
    if not _INTEGER.fullmatch(extracted):
        return Verdict(False, False, extracted, reason="answer is not an integer literal")
    correct = int(extracted) == int(expected)
    reason = "correct" if correct else f"expected {expected}, got {extracted}"
    return Verdict(correct, True, extracted, reason=reason)


def content_key(a: int, op: str, b: int) -> tuple[int, str, int]:
    """What makes two problems the same: ``85+37`` and ``37+85`` share a key, so a problem
    and its mirror never land in different splits (an eval item seen in training)."""
    return (min(a, b), op, max(a, b)) if op in "+*" else (a, op, b)


class ArithmeticTask(SyntheticTask):
    """``a op b`` with ``digits``-digit operands; see the module docstring for scoring."""

    name = "arithmetic"

    def __init__(
        self,
        digits: int = 2,
        ops: str = "+",
        seed: int = 0,
        answer_format: str = "boxed",
        train_size: int = 3000,
        dev_size: int = 200,
        eval_size: int = 300,
    ) -> None:
        """
        Args:
            digits: digits of each operand, 1 to 18 (1 means 0-9, 2 means 10-99, ...).
            ops: the operators to draw from, any non-empty subset of ``"+-*"``.
            seed: the only source of randomness for the splits.
            answer_format: ``"boxed"`` (`` \\boxed{122}``) or ``"tagged"``
                (`` <answer>122</answer>``).
            train_size, dev_size, eval_size: problems per split. Problems are distinct up
                to the order of a commutative operation (``85+37`` is ``37+85``), so
                2-digit addition has 90·91/2 = 4095 of them; the default sizes fit.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        check_int("digits", digits, 1, _MAX_DIGITS)
        if not isinstance(ops, str) or not ops or not set(ops) <= set("+-*"):
            raise ValueError(f"ops must be a non-empty subset of '+-*', got {ops!r}")
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}"
            )
        self.digits = digits
        self.ops = "".join(sorted(set(ops), key="+-*".index))
        self.answer_format = answer_format

    def sample(self, rng: random.Random) -> Draft:
        low = 0 if self.digits == 1 else 10 ** (self.digits - 1)
        high = 10**self.digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        op = rng.choice(self.ops)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        answer = str(value)
        prompt = f"Q: {a}{op}{b}=? A:"
        return Draft(
            content_key(a, op, b), prompt, answer, " " + format_answer(answer, self.answer_format)
        )

    def check(self, problem: Problem, completion: str) -> Verdict:
        return check_integer_answer(problem.answer, completion, self.answer_format)

    @property
    def longest_target_chars(self) -> int:
        # 99+99=198 and 10-99=-89 take digits+1 characters, 99*99=9801 takes 2·digits.
        answer = max(self.digits + 1 if op in "+-" else 2 * self.digits for op in self.ops)
        return len(" " + format_answer("9" * answer, self.answer_format))

    @property
    def alphabet(self) -> str:
        return alphabet_of(
            "Q: =? A:", "0123456789-", self.ops, format_answer("", self.answer_format)
        )
