"""Evaluate untrusted integer arithmetic such as ``25+3*7`` without ``eval``.

A recursive-descent parser over the grammar

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := "-" factor | "(" expr ")" | INTEGER

with exact rational arithmetic (``fractions.Fraction``), so ``6/4*2`` is 3 and not
2 or 3.0000000000000004. Input length, nesting depth and the magnitude of every
literal and intermediate value are bounded, so no input can make it slow or
exhaust memory. Anything else (``**``, names, calls, unicode digits) is an
``ExpressionError`` whose message says what was wrong and where.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 32
"""Most parentheses plus unary minus signs that may enclose any point of the expression."""
MAX_MAGNITUDE = 10**12
"""Bound on |numerator| and denominator of every literal and intermediate value."""

_DIGITS = frozenset("0123456789")
_SYMBOLS = frozenset("+-*/()")


class ExpressionError(ValueError):
    """The text is not a valid, bounded integer arithmetic expression."""


class Evaluation(NamedTuple):
    value: Fraction
    """Exact value of the expression."""
    literals: tuple[int, ...]
    """Integer literals in the order they appear, e.g. ``(25, 3, 7)`` for ``25+3*7``."""


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in _DIGITS:
            start = i
            while i < len(text) and text[i] in _DIGITS:
                i += 1
            tokens.append(text[start:i])
            continue
        if char in _SYMBOLS:
            tokens.append(char)
        elif not char.isspace():
            raise ExpressionError(
                f"unexpected character {char!r} at position {i}; "
                "only digits, + - * / and parentheses are allowed"
            )
        i += 1
    return tokens


def _bounded(value: Fraction) -> Fraction:
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ExpressionError(f"intermediate value exceeds the magnitude limit {MAX_MAGNITUDE}")
    return value


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.literals: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term()
            value = _bounded(value + right if op == "+" else value - right)
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor()
            if op == "*":
                value = _bounded(value * right)
            elif right == 0:
                raise ExpressionError("division by zero")
            else:
                value = _bounded(value / right)
        return value

    def factor(self) -> Fraction:
        token = self.take()
        if token in ("-", "("):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"expression nests deeper than {MAX_DEPTH} levels")
            value = -self.factor() if token == "-" else self.expr()
            if token == "(":
                if self.peek() != ")":
                    raise ExpressionError("missing closing parenthesis")
                self.take()
            self.depth -= 1
            return value
        if token[0] in _DIGITS:
            literal = int(token)  # token is at most MAX_EXPRESSION_CHARS ASCII digits
            _bounded(Fraction(literal))
            self.literals.append(literal)
            return Fraction(literal)
        raise ExpressionError(f"unexpected {token!r} where a number was expected")


def evaluate(text: str, *, integral: bool = False) -> Evaluation:
    """Exact value of an integer arithmetic expression and the literals it uses.

    With ``integral=True`` a non-integer result (``7/2``) is an ``ExpressionError``;
    intermediate fractions are always allowed (``6/4*2`` is 3).
    """
    if not isinstance(text, str):
        raise ExpressionError(f"expected a string, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"expression has {len(text)} characters; the limit is {MAX_EXPRESSION_CHARS}"
        )
    tokens = _tokenize(text)
    if not tokens:
        raise ExpressionError("empty expression")
    parser = _Parser(tokens)
    value = parser.expr()
    if parser.pos != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.pos]!r} after a complete expression")
    if integral and value.denominator != 1:
        raise ExpressionError(f"result {value} is not an integer")
    return Evaluation(value, tuple(parser.literals))
