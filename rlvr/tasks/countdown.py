"""Countdown: reach a target from given numbers, e.g. ``Q: 3 7 25 -> 46 A:`` → `` \\boxed{25+3*7}``.

Each problem is generated from a random expression that uses every sampled number
exactly once with ``+ - * /`` (subtraction and division only when the result is a
positive integer, as in the TV game), so every problem is solvable and the target
completion is that expression. Targets lie in 1..``max_target`` so a tiny model can
learn the task.

Verdict: ``formatted`` when the last ``\\boxed{...}`` holds an expression that
``rlvr.verify.safe_math`` parses; ``correct`` when its exact value equals the
target and it uses each given number at most once (not every number need be used).
The numbers and target are read back from the prompt, so a verdict needs only the
``Problem``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import NamedTuple

from rlvr.checks import check_int
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import ExpressionError, Verdict, evaluate, extract_boxed

_PROMPT = re.compile(r"Q: ([0-9]+(?: [0-9]+)*) -> ([0-9]+) A:")
_MAX_SAMPLE_TRIES = 10_000


class _Node(NamedTuple):
    value: int
    text: str
    precedence: int  # 1 for + -, 2 for * /, 3 for a bare number


def _combine(left: _Node, op: str, right: _Node) -> _Node:
    precedence = 1 if op in "+-" else 2
    left_text = f"({left.text})" if left.precedence < precedence else left.text
    # a-(b-c) and a/(b*c) need parentheses; a+(b-c) and a*(b/c) are equal without them.
    right_needs = right.precedence < precedence or (right.precedence == precedence and op in "-/")
    right_text = f"({right.text})" if right_needs else right.text
    if op == "+":
        value = left.value + right.value
    elif op == "-":
        value = left.value - right.value
    elif op == "*":
        value = left.value * right.value
    else:
        value = left.value // right.value
    return _Node(value, f"{left_text}{op}{right_text}", precedence)


def _random_expression(numbers: list[int], rng: random.Random) -> _Node:
    """A random binary expression over ``numbers`` in order, intermediate values positive."""
    if len(numbers) == 1:
        return _Node(numbers[0], str(numbers[0]), 3)
    split = rng.randint(1, len(numbers) - 1)
    left = _random_expression(numbers[:split], rng)
    right = _random_expression(numbers[split:], rng)
    ops = ["+", "*"]
    if left.value > right.value:
        ops.append("-")
    if left.value % right.value == 0:
        ops.append("/")
    return _combine(left, rng.choice(ops), right)


def parse_prompt(prompt: str) -> tuple[list[int], int]:
    """The numbers and target of a countdown prompt; ``ValueError`` if it is not one."""
    match = _PROMPT.fullmatch(prompt)
    if match is None:
        raise ValueError(f"not a countdown prompt: {prompt[:80]!r}")
    return [int(n) for n in match.group(1).split()], int(match.group(2))


class CountdownTask(SyntheticTask):
    """Reach a target from ``num_count`` numbers; see the module docstring for scoring."""

    name = "countdown"

    def __init__(
        self,
        num_count: int = 3,
        max_number: int = 25,
        max_target: int = 200,
        seed: int = 0,
        train_size: int = 5000,
        dev_size: int = 200,
        eval_size: int = 300,
    ) -> None:
        """
        Args:
            num_count: how many numbers each problem gives, 2 to 6.
            max_number: numbers are drawn from 1..max_number (repeats allowed).
            max_target: targets are in 1..max_target.
            seed: the only source of randomness for the splits.
            train_size, dev_size, eval_size: problems per split.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        for field, value, low, high in (
            ("num_count", num_count, 2, 6),
            ("max_number", max_number, 1, 10_000),
            ("max_target", max_target, 1, 1_000_000),
        ):
            check_int(field, value, low, high)
        self.num_count = num_count
        self.max_number = max_number
        self.max_target = max_target

    def sample(self, rng: random.Random) -> Draft:
        for _ in range(_MAX_SAMPLE_TRIES):
            numbers = [rng.randint(1, self.max_number) for _ in range(self.num_count)]
            expression = _random_expression(numbers, rng)
            if 1 <= expression.value <= self.max_target:
                shown = sorted(numbers)
                prompt = f"Q: {' '.join(map(str, shown))} -> {expression.value} A:"
                key = (tuple(shown), expression.value)
                target = f" \\boxed{{{expression.text}}}"
                return Draft(key, prompt, str(expression.value), target)
        raise ValueError(
            f"countdown: no expression over {self.num_count} numbers up to {self.max_number} "
            f"landed in 1..{self.max_target} after {_MAX_SAMPLE_TRIES} tries; raise max_target"
        )

    def check(self, problem: Problem, completion: str) -> Verdict:
        numbers, target = parse_prompt(problem.prompt)
        extracted = extract_boxed(completion)
        if extracted is None:
            return Verdict(False, False, None, reason="no \\boxed{...} answer found")
        try:
            value, literals = evaluate(extracted)
        except ExpressionError as error:
            return Verdict(False, False, extracted, reason=f"unparsable expression: {error}")
        unavailable = Counter(literals) - Counter(numbers)
        if unavailable:
            extra = ", ".join(map(str, sorted(unavailable.elements())))
            return Verdict(False, True, extracted, reason=f"uses numbers not available: {extra}")
        if value != target:
            return Verdict(False, True, extracted, reason=f"expected {target}, got {value}")
        return Verdict(True, True, extracted, reason="correct")

    @property
    def longest_target_chars(self) -> int:
        # Every number, one operator between neighbours, and at most one pair of parentheses
        # around each of the num_count-2 inner nodes of the expression tree (never a leaf).
        count = self.num_count
        expression = count * len(str(self.max_number)) + (count - 1) + 2 * (count - 2)
        return len(" \\boxed{}") + expression

    @property
    def alphabet(self) -> str:
        return alphabet_of("Q: -> A:", "0123456789", "+-*/()", "\\boxed{}")
