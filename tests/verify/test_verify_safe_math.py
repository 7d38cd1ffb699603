"""The safe arithmetic evaluator: precedence worked by hand, and everything it must refuse."""

import re
from fractions import Fraction

import pytest

from rlvr.verify import ExpressionError, evaluate
from rlvr.verify.safe_math import MAX_DEPTH, MAX_EXPRESSION_CHARS, MAX_MAGNITUDE


@pytest.mark.parametrize(
    ("text", "value", "literals"),
    [
        ("2+3*4", 14, (2, 3, 4)),  # 3*4 = 12 first, then 2 + 12 = 14
        ("(2+3)*4", 20, (2, 3, 4)),  # 5 * 4 = 20
        ("7-10", -3, (7, 10)),
        ("6/4*2", 3, (6, 4, 2)),  # (6/4)*2 = 3/2 * 2 = 3, exact
        ("10-4-3", 3, (10, 4, 3)),  # left-associative: (10-4)-3 = 3, not 10-(4-3) = 9
        ("24/4/2", 3, (24, 4, 2)),  # (24/4)/2 = 3, not 24/(4/2) = 12
        ("-3+5", 2, (3, 5)),
        ("-(2+3)*-2", 10, (2, 3, 2)),  # (-5) * (-2) = 10
        (" 25 + 3 * 7 ", 46, (25, 3, 7)),
        ("007", 7, (7,)),
    ],
)
def test_values_and_literals(text, value, literals):
    result = evaluate(text)
    assert result.value == value
    assert result.literals == literals
    assert evaluate(text, integral=True).value == value


def test_fraction_result_is_exact():
    assert evaluate("7/2").value == Fraction(7, 2)
    assert evaluate("1/3+1/3+1/3").value == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os')", "unexpected character '_'"),
        ("2**999", "unexpected '*'"),
        ("2^3", "unexpected character '^'"),
        ("1/0", "division by zero"),
        ("5/(3-3)", "division by zero"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("(1+2", "missing closing parenthesis"),
        ("1+2)", "unexpected ')'"),
        ("1+", "ends too early"),
        ("1 2", "unexpected '2'"),
        ("+1", "unexpected '+'"),
        ("1.5", "unexpected character '.'"),
        ("\u0661+1", "unexpected character"),  # Arabic-Indic digit one
        ("x", "unexpected character 'x'"),
    ],
)
def test_rejects_bad_input(text, message):
    with pytest.raises(ExpressionError, match=re.escape(message)):
        evaluate(text)


def test_rejects_too_long():
    text = "1+" * MAX_EXPRESSION_CHARS + "1"
    with pytest.raises(ExpressionError, match="limit is 200"):
        evaluate(text)


def test_rejects_deep_nesting():
    depth = MAX_DEPTH + 1
    with pytest.raises(ExpressionError, match="nests deeper"):
        evaluate("(" * depth + "1" + ")" * depth)
    with pytest.raises(ExpressionError, match="nests deeper"):
        evaluate("-" * depth + "1")
    assert evaluate("(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH).value == 1


def test_rejects_huge_values():
    with pytest.raises(ExpressionError, match="magnitude"):
        evaluate("9" * 13)  # a literal above 10**12
    with pytest.raises(ExpressionError, match="magnitude"):
        evaluate("*".join(["999"] * 6))  # 999**6 ≈ 9.9e17
    assert evaluate(str(MAX_MAGNITUDE)).value == MAX_MAGNITUDE


def test_non_integer_result_rejected_when_integral():
    with pytest.raises(ExpressionError, match="not an integer"):
        evaluate("7/2", integral=True)


def test_non_string_rejected():
    with pytest.raises(ExpressionError, match="expected a string"):
        evaluate(12)  # type: ignore[arg-type]


def test_expression_error_is_value_error():
    assert issubclass(ExpressionError, ValueError)
