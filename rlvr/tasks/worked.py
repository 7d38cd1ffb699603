"""Worked multi-step arithmetic: ``Q: 3+4*2-5=? A:`` → `` 4*2=8 3+8=11 11-5=6 \\boxed{6}``.

A task where response length and exploration can move: each expression has ``min_terms``
to ``max_terms`` one-digit-to-``max_number`` numbers joined by ``+ - *`` (usual precedence),
and a completion may show its work (one ``a op b=c`` step per operation: products left to
right, then sums and differences left to right) or jump straight to the answer.

The warm-start completions (``Problem.target``) are a seeded mix, so RL starts from a
policy that writes both lengths and makes mistakes: a fraction ``short_frac`` answers
directly (`` \\boxed{6}``), a fraction ``wrong_frac`` shows its work with one step's
result off by 1 or 2 and the error carried to a wrong boxed answer, the rest show correct
work. With ``wrong_frac > 0`` some targets are deliberately wrong: they are warm-start
data, not reference solutions (``Problem.answer`` is always the true value).

Verdict: as arithmetic's — the last ``\\boxed{...}`` must be an integer literal equal to
the expression's value; the steps are not checked (the reward is the outcome only).
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from rlvr.tasks.arithmetic import check_integer_answer
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict

_OPS = "+-*"
_SLIPS = (-2, -1, 1, 2)


class Step(NamedTuple):
    left: int
    op: str
    right: int
    result: int

    def text(self) -> str:
        return f"{self.left}{self.op}{self.right}={self.result}"


def _apply(left: int, op: str, right: int) -> int:
    return left + right if op == "+" else left - right if op == "-" else left * right


def worked_steps(numbers: list[int], ops: list[str], slip: tuple[int, int] | None = None):
    """The steps that evaluate ``numbers`` joined by ``ops``: products left to right, then
    ``+``/``-`` left to right. ``slip=(i, delta)`` adds ``delta`` to step ``i``'s result and
    carries the error on. Returns (steps, final value).

    E.g. [3, 4, 2, 5], [+, *, -] → 4*2=8, 3+8=11, 11-5=6; value 6.
    """
    steps: list[Step] = []

    def record(left: int, op: str, right: int) -> int:
        result = _apply(left, op, right)
        if slip is not None and slip[0] == len(steps):
            result += slip[1]
        steps.append(Step(left, op, right, result))
        return result

    terms, signs = [numbers[0]], []
    for op, number in zip(ops, numbers[1:], strict=True):
        if op == "*":
            terms[-1] = record(terms[-1], "*", number)
        else:
            signs.append(op)
            terms.append(number)
    value = terms[0]
    for op, term in zip(signs, terms[1:], strict=True):
        value = record(value, op, term)
    return steps, value


def content_key(numbers: list[int], ops: list[str]) -> tuple:
    """Sorted signed products: ``3+4*2-5``, ``2*4+3-5`` and ``3-5+4*2`` share a key, so no
    problem and its mirror (the same sum of products in another order) land in two splits."""
    products: list[tuple[str, tuple[int, ...]]] = []
    sign, factors = "+", [numbers[0]]
    for op, number in zip(ops, numbers[1:], strict=True):
        if op == "*":
            factors.append(number)
        else:
            products.append((sign, tuple(sorted(factors))))
            sign, factors = op, [number]
    products.append((sign, tuple(sorted(factors))))
    return tuple(sorted(products))


class WorkedArithmeticTask(SyntheticTask):
    """Multi-step arithmetic with optional written steps; see the module docstring."""

    name = "worked"

    def __init__(
        self,
        min_terms: int = 3,
        max_terms: int = 4,
        max_number: int = 9,
        short_frac: float = 0.3,
        wrong_frac: float = 0.2,
        seed: int = 0,
        train_size: int = 4000,
        dev_size: int = 200,
        eval_size: int = 300,
    ) -> None:
        """
        Args:
            min_terms, max_terms: numbers per expression, 2 to 6, min ≤ max.
            max_number: numbers are drawn from 1..max_number, at most 99.
            short_frac: fraction of warm-start targets that answer without steps.
            wrong_frac: fraction of warm-start targets with one wrong step carried on;
                short_frac + wrong_frac ≤ 1.
            seed: the only source of randomness for the splits and the target mix.
            train_size, dev_size, eval_size: problems per split.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        for field, value, low, high in (
            ("min_terms", min_terms, 2, 6),
            ("max_terms", max_terms, 2, 6),
            ("max_number", max_number, 1, 99),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{field} must be an integer from {low} to {high}, got {value!r}")
        if min_terms > max_terms:
            raise ValueError(f"min_terms={min_terms} must be ≤ max_terms={max_terms}")
        for field, value in (("short_frac", short_frac), ("wrong_frac", wrong_frac)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"{field} must be a number in [0, 1], got {value!r}")
        if short_frac + wrong_frac > 1:
            raise ValueError(
                f"short_frac + wrong_frac must be ≤ 1, got {short_frac} + {wrong_frac}"
            )
        self.min_terms, self.max_terms, self.max_number = min_terms, max_terms, max_number
        self.short_frac, self.wrong_frac = float(short_frac), float(wrong_frac)

    def sample(self, rng: random.Random) -> Draft:
        count = rng.randint(self.min_terms, self.max_terms)
        numbers = [rng.randint(1, self.max_number) for _ in range(count)]
        ops = [rng.choice(_OPS) for _ in range(count - 1)]
        steps, value = worked_steps(numbers, ops)
        style = rng.random()
        if style < self.short_frac:
            target = f" \\boxed{{{value}}}"
        else:
            if style < self.short_frac + self.wrong_frac:
                slip = (rng.randrange(len(steps)), rng.choice(_SLIPS))
                steps, shown = worked_steps(numbers, ops, slip)
            else:
                shown = value
            target = " " + " ".join(s.text() for s in steps) + f" \\boxed{{{shown}}}"
        pairs = zip(ops, numbers[1:], strict=True)
        expression = str(numbers[0]) + "".join(f"{o}{n}" for o, n in pairs)
        prompt = f"Q: {expression}=? A:"
        return Draft(content_key(numbers, ops), prompt, str(value), target)

    def check(self, problem: Problem, completion: str) -> Verdict:
        return check_integer_answer(problem.answer, completion, "boxed")

    @property
    def longest_target_chars(self) -> int:
        # The longest target of this task's own splits: exact, since RL and eval only ever
        # see these problems (drawing them is a fraction of a second).
        return max(
            len(p.target) for split in ("train", "dev", "eval") for p in self.problems(split)
        )

    @property
    def alphabet(self) -> str:
        return alphabet_of("Q: =? A:", "0123456789", _OPS, " =", "\\boxed{}")


_PROMPT = re.compile(r"Q: ([0-9]+(?:[-+*][0-9]+)*)=\? A:")


def parse_prompt(prompt: str) -> tuple[list[int], list[str]]:
    """The numbers and operators of a worked prompt; ``ValueError`` if it is not one."""
    match = _PROMPT.fullmatch(prompt)
    if match is None:
        raise ValueError(f"not a worked-arithmetic prompt: {prompt[:80]!r}")
    parts = re.split(r"([-+*])", match.group(1))
    return [int(n) for n in parts[::2]], parts[1::2]
